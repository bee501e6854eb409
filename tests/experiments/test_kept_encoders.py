"""A GPU session brings back its pre-trained encoders as kept encoder cards, and --collect files them under the
run's results folder: a small session faked offline (a work folder with finished pre-trainings, packed, collected)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from experiments.gpu_session.kept_encoders import ENCODERS, keep_encoders
from experiments.gpu_session.pack import collect, pack, repack, unpack
from experiments.gpu_session.state import RunState
from experiments.gpu_session.terms import returned_violations
from experiments.status import write_status
from gcl_monai.networks import GCLNet, restore_encoder

FEATURES = (8, 8, 16, 16, 32, 8)


def _session(work: Path) -> dict[str, dict[str, torch.Tensor]]:
    """A work folder whose SimCLR (seed 0) and GCL (seed 3) pre-trainings finished, GCL probed twice."""
    RunState(work).create("rehearse", None)
    encoders = {}
    for seed, name in enumerate(("simclr", "gcl_p3")):
        torch.manual_seed(seed)
        folder = work / "results" / "gpu-rehearse_acdc" / "pretrain" / name
        write_status(folder, {"status": "finished"})
        encoders[name] = GCLNet(spatial_dims=2, features=FEATURES).encoder_state_dict()
        torch.save(encoders[name], folder / "encoder.pt")
    probes = [{"epoch": 1, "dice": 0.4}, {"epoch": 2, "dice": 0.5}]
    (folder / "probe_history.jsonl").write_text("".join(json.dumps(p) + "\n" for p in probes))
    interrupted = work / "results" / "gpu-rehearse_acdc" / "pretrain" / "random_encoder"
    write_status(interrupted, {"status": "interrupted"})
    return encoders


def test_a_session_brings_back_each_finished_encoder_as_a_card(tmp_path):
    work = tmp_path / "work"
    encoders = _session(work)
    kept = keep_encoders(work, "rehearse")
    assert [p.relative_to(work).as_posix() for p in kept] == [
        f"{ENCODERS}/gpu-rehearse_acdc/gcl_p3.pt",
        f"{ENCODERS}/gpu-rehearse_acdc/simclr.pt",
    ]
    gcl = json.loads(kept[0].with_suffix(".json").read_text())
    assert (gcl["recipe"], gcl["seed"], gcl["budget"], gcl["probe_dice"], gcl["probe_epoch"]) == (
        "gcl",
        3,
        "rehearse",
        0.5,
        2,
    )
    assert gcl["architecture"]["features"] == list(FEATURES[:5]) and gcl["stored_dtype"] == "bfloat16"
    simclr = json.loads(kept[1].with_suffix(".json").read_text())
    assert (simclr["recipe"], simclr["seed"]) == ("simclr", 0) and "probe_dice" not in simclr
    # kept once: a later call of the same session leaves a card of the same encoder.pt as it is
    written = kept[0].stat().st_mtime_ns
    assert keep_encoders(work, "rehearse") == kept and kept[0].stat().st_mtime_ns == written

    out = tmp_path / "out"
    manifest = pack(work, out, "# report\n")
    assert not returned_violations(out)
    assert {f"{ENCODERS}/gpu-rehearse_acdc/{n}.{s}" for n in ("gcl_p3", "simclr") for s in ("pt", "json")} <= set(
        manifest["packed"]
    )
    written = collect(out, tmp_path / "docs" / "gpu-rehearse_acdc")
    folder = tmp_path / "docs" / "gpu-rehearse_acdc" / ENCODERS
    assert sorted(p.name for p in folder.iterdir()) == ["gcl_p3.json", "gcl_p3.pt", "simclr.json", "simclr.pt"]
    assert set(folder.iterdir()) <= set(written)
    # the collected card restores the session's encoder, within bfloat16's rounding
    restored = restore_encoder(folder / "gcl_p3.json", features=FEATURES, in_channels=1)
    for key, value in encoders["gcl_p3"].items():
        assert torch.allclose(restored[key], value, rtol=2**-8, atol=1e-30), key


def test_the_carry_to_the_next_session_leaves_the_cards_out(tmp_path):
    work = tmp_path / "work"
    _session(work)
    keep_encoders(work, "rehearse")
    pack(work, tmp_path / "out", "# report\n")
    manifest = repack(tmp_path / "out", tmp_path / "carry", max_bytes=16 << 20)
    assert not [p for p in manifest["packed"] if p.startswith(ENCODERS)]
    unpack(tmp_path / "carry", tmp_path / "fresh")
    assert not (tmp_path / "fresh" / ENCODERS).exists()
    assert (tmp_path / "fresh" / "results" / "gpu-rehearse_acdc" / "pretrain" / "gcl_p3" / "encoder.pt").exists()


def test_an_encoder_that_is_no_basic_unet_gets_no_card_and_still_comes_back(tmp_path):
    work = tmp_path / "work"
    RunState(work).create("rehearse", None)
    folder = work / "results" / "x_acdc" / "pretrain" / "simclr"
    write_status(folder, {"status": "finished"})
    torch.save({"w": torch.randn(4, 4)}, folder / "encoder.pt")
    assert keep_encoders(work, "rehearse") == []
    assert "results/x_acdc/pretrain/simclr/encoder.pt" in pack(work, tmp_path / "out", "# report\n")["packed"]


def test_a_kept_encoder_left_behind_for_room_costs_no_pre_training(tmp_path):
    work = tmp_path / "work"
    _session(work)
    keep_encoders(work, "rehearse")
    out = tmp_path / "out"
    pack(work, out, "# report\n")
    state = json.loads((out / "gpu_run.json").read_text())
    state["returned"]["left_behind"] = [f"{ENCODERS}/gpu-rehearse_acdc/gcl_p3.pt"]
    (out / "gpu_run.json").write_text(json.dumps(state))
    unpack(out, tmp_path / "fresh")
    experiment = tmp_path / "fresh" / "results" / "gpu-rehearse_acdc"
    assert (experiment / "pretrain" / "gcl_p3" / "encoder.pt").exists() and not (experiment / "discarded").exists()
