"""gpu-run: the session terms' checks, packing and resuming, the state, the stop on a verdict, and the rehearsal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.experiment import Experiment
from experiments.gpu_session import BUDGETS, SessionTerms, get_budget, pack, returned_violations, unpack
from experiments.gpu_session.pack import ARCHIVE
from experiments.gpu_session.sessions import format_plan, plan_sessions
from experiments.gpu_session.state import RunState
from experiments.gpu_session.steps import verdict_stops
from experiments.gpu_session.terms import MIB, TERMS, part_sizes, session_calls, travel_bytes
from experiments.plan import plan_cells
from experiments.presets import PRESETS
from experiments.status import write_status

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())


def test_returned_violations_name_each_broken_term(tmp_path):
    terms = SessionTerms(max_files=3, max_file_bytes=100, max_total_bytes=250, max_depth=1)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "ok.txt").write_bytes(b"x" * 100)
    assert returned_violations(tmp_path, terms) == []
    (tmp_path / "big.bin").write_bytes(b"x" * 101)
    (tmp_path / "a" / "b" / "deep.txt").write_bytes(b"x")
    (tmp_path / "a" / "bad name").write_bytes(b"x" * 60)
    problems = returned_violations(tmp_path, terms)
    assert "4 files in" in problems[0] and "at most 3" in problems[0]
    assert any(p.startswith("big.bin: ") and "over" in p for p in problems)
    assert any(p.startswith("a/b/deep.txt: 2 folders deep") for p in problems)
    assert any("bad name" in p and "names other than" in p for p in problems)
    assert "in all, at most 0 MiB come back" in problems[-1]  # 262 bytes over 250


def test_travel_bytes_counts_the_tree_and_each_carried_path(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("carried/\n")
    (tmp_path / "tracked.txt").write_bytes(b"x" * 1000)
    (tmp_path / "carried").mkdir()
    (tmp_path / "carried" / "w.bin").write_bytes(b"x" * 5000)
    (tmp_path / "empty.txt").write_bytes(b"")
    sizes = travel_bytes(tmp_path, ["carried"])
    # each file in whole 4096-byte blocks: tracked.txt and .gitignore one block each, w.bin two, empty.txt none
    assert sizes == {"tree": 2 * 4096, "carried": 2 * 4096, "total": 4 * 4096}
    with pytest.raises(FileNotFoundError, match="missing"):
        travel_bytes(tmp_path, ["missing"])


def test_part_sizes_are_as_equal_as_bytes_allow_the_last_never_longest():
    assert part_sizes(10, 3) == [4, 3, 3]
    assert part_sizes(9, 3) == [3, 3, 3]
    assert part_sizes(5, 1) == [5]
    with pytest.raises(ValueError, match="2 bytes cannot be cut into 3"):
        part_sizes(2, 3)


B = 4096  # one block, as travel_bytes counts


def test_session_calls_one_call_when_the_payload_fits_whole():
    # checkout 10 blocks + wheels 2 + payload 5 (20380 bytes, counted in whole blocks) + results 1 = 18 blocks
    plan = session_calls(10 * B, 2 * B, 5 * B - 100, B, limit=18 * B)
    assert plan.parts == (5 * B - 100,) and plan.calls == (18 * B,)


def test_session_calls_split_the_payload_when_it_does_not():
    # one block less: the whole is over (18 > 17). The last call carries checkout 10 + wheels 2 + results 1 +
    # manifest 1 = 14 blocks, so its part may take 3; two parts of 10190 bytes take 3 blocks each
    plan = session_calls(10 * B, 2 * B, 5 * B - 100, B, limit=17 * B)
    assert plan.parts == (10190, 10190) and plan.calls == (13 * B, 17 * B)
    # 10 blocks of payload: halves (5 blocks) and thirds (13654 bytes: 4 blocks) leave the last call over 17 blocks;
    # quarters (10240 bytes: 3 blocks) fit, the first three calls carrying the checkout and one part each
    plan = session_calls(10 * B, 2 * B, 10 * B, B, limit=17 * B)
    assert plan.parts == (10240,) * 4 and plan.calls == (13 * B, 13 * B, 13 * B, 17 * B)


def test_session_calls_with_today_s_checkout_and_21_mb_of_encoders_more():
    wheels, payload = 2_200_000, 44_500_000  # rehearse.WHEELS_BYTES and FULL_PAYLOAD_BYTES
    # 2026-11-28's checkout (docs/gpu_run.md, "Travel budget"): 13,836,288 + 2,200,000 + 44,503,040 (10,865 blocks)
    # + 1,048,576 = 61,587,904 bytes in one call
    assert session_calls(13_836_288, wheels, payload, MIB, TERMS.tree_bytes).calls == (61_587_904,)
    # with 21 MB of encoders tracked the whole would be 82,587,904: two parts of 22,250,000 bytes (5,433 blocks:
    # 22,253,568); the first call 34,836,288 + 22,253,568, the last adds the wheels, the results and the manifest
    plan = session_calls(13_836_288 + 21_000_000, wheels, payload, MIB, TERMS.tree_bytes)
    assert plan.parts == (22_250_000, 22_250_000)
    assert plan.calls == (57_089_856, 60_342_528)
    assert plan.describe() == "2 call(s), the payload in 2 parts: 54.4, 57.5 MiB (limit 61.0 MiB each)"


def test_session_calls_refuse_when_no_part_fits_beside_the_checkout():
    # checkout 10 + wheels 2 + results 1 + manifest 1 + a one-block part = 15 blocks, over 14
    with pytest.raises(ValueError, match="no part of the payload fits: the first call's checkout 0.0 \\+ carry"):
        session_calls(10 * B, 2 * B, 5 * B, B, limit=14 * B)
    # the first call's checkout 10 + carry 4 + a one-block part = 15 blocks, over 14 (the last call's 15 are too)
    with pytest.raises(ValueError, match="over the limit of 0.1 MiB"):
        session_calls(10 * B, B, 5 * B, 0, limit=14 * B, carry=4 * B)
    with pytest.raises(ValueError, match="a payload of 0 bytes"):
        session_calls(10 * B, 2 * B, 0, B, limit=14 * B)


def test_session_calls_send_the_carry_with_the_first_part():
    # checkout 10 + wheels 2 + carry 3 + payload 5 (20380 bytes) + results 1 = 21 blocks: one call when it fits
    plan = session_calls(10 * B, 2 * B, 5 * B - 100, B, limit=21 * B, carry=3 * B)
    assert plan.parts == (5 * B - 100,) and plan.calls == (21 * B,)
    # under 20 blocks: halves of 10190 bytes (3 blocks); the first call carries the checkout, the carry and part 0
    # (16 blocks), the last the checkout, part 1, the wheels, the results and the manifest (17 blocks)
    plan = session_calls(10 * B, 2 * B, 5 * B - 100, B, limit=20 * B, carry=3 * B)
    assert plan.parts == (10190, 10190) and plan.calls == (16 * B, 17 * B)
    # a carry of 6 blocks leaves the first call 4 blocks for its part: halves (3 blocks) still fit (19 blocks);
    # a carry of 8 leaves 2: thirds (6794 bytes: 2 blocks) fit, the calls 20, 12 and 16 blocks
    assert session_calls(10 * B, 2 * B, 5 * B - 100, B, limit=20 * B, carry=6 * B).calls == (19 * B, 17 * B)
    plan = session_calls(10 * B, 2 * B, 5 * B - 100, B, limit=20 * B, carry=8 * B)
    assert plan.parts == (6794, 6793, 6793) and plan.calls == (20 * B, 12 * B, 16 * B)


def test_the_rehearsal_checks_each_call_of_a_second_session_at_the_paper_s_width():
    from experiments.gpu_session.rehearse import _paper_width_travel

    # 2026-11-28's checkout: 13,836,288 + 2,200,000 + the cut payload 21,500,000 (5,249 blocks: 21,499,904 + 4,096)
    # + two paper-width encoders in bfloat16 + 1,048,576 in one call
    ok, detail = _paper_width_travel(13_836_288)
    assert ok and detail.endswith("1 call(s), the payload whole: 54.8 MiB (limit 61.0 MiB each)")
    # the checkout with cpu-converged's three SimCLR encoders tracked (2026-12-07: 22,380,544), whose single call
    # (62.9 MiB) failed the check that summed the second session in one call: two calls, the encoders in the first
    ok, detail = _paper_width_travel(22_380_544)
    assert ok and detail == (
        "checkout 21.3 + wheels 2.1 + ACDC cut to the fine-tuning's patients 20.5 + two bfloat16 encoders 18.0 + "
        "results 1.0 MiB: 2 call(s), the payload in 2 parts: 49.6, 34.7 MiB (limit 61.0 MiB each) "
        "(offline_payload split --parts 2)"
    )
    # with all nine of its encoders (six more of 2.4 MB): three calls
    assert _paper_width_travel(22_380_544 + 6 * 2_400_000)[1].endswith(
        "3 call(s), the payload in 3 parts: 59.9, 41.9, 45.0 MiB (limit 61.0 MiB each) "
        "(offline_payload split --parts 3)"
    )
    # a checkout that leaves no room beside the two encoders: 46e6 + 18.9e6 > 64e6
    ok, detail = _paper_width_travel(46_000_000)
    assert not ok and "no part of the payload fits" in detail


def test_the_rehearsal_checks_each_call_of_a_first_session():
    from experiments.gpu_session.rehearse import _first_session_travel

    ok, detail = _first_session_travel(13_836_288)  # 2026-11-28's checkout: 61,587,904 bytes, one call
    assert ok and detail.endswith("1 call(s), the payload whole: 58.7 MiB (limit 61.0 MiB each)")
    ok, detail = _first_session_travel(13_836_288 + 21_000_000)  # 21 MB of encoders more: two calls
    assert ok
    assert detail == (
        "checkout 33.2 + wheels 2.1 + ACDC 42.4 + results 1.0 MiB: 2 call(s), the payload in 2 parts: 54.4, 57.5 MiB "
        "(limit 61.0 MiB each) (offline_payload split --parts 2)"
    )
    # a checkout of 61,000,000 bytes leaves no room beside the wheels and results: 61e6 + 2.2e6 + 1 MiB > 64e6
    ok, detail = _first_session_travel(61_000_000)
    assert not ok and "no part of the payload fits" in detail and detail.startswith("checkout 58.2 + wheels")
    # the terms' limit is the one checked: under 30,000,000 bytes the last call leaves 12,911,040 bytes for its part
    # (30e6 - 13,836,288 - 2,200,000 - 1,048,576 - 4,096), so quarters of 11,125,000 bytes (11,128,832 in blocks)
    ok, detail = _first_session_travel(13_836_288, SessionTerms(tree_bytes=30_000_000))
    assert ok and detail.endswith(
        "4 call(s), the payload in 4 parts: 23.8, 23.8, 23.8, 26.9 MiB (limit 28.6 MiB each) "
        "(offline_payload split --parts 4)"
    )
    assert not _first_session_travel(13_836_288, SessionTerms(tree_bytes=17_000_000))[0]  # 17,093,056 needed


def _work_with_pretrainings(work: Path) -> dict[str, torch.Tensor]:
    """A work folder with a finished pre-training (encoder) and an interrupted one (its checkpoint)."""
    RunState(work).create("rehearse", None)
    finished = work / "results" / "x_acdc" / "pretrain" / "simclr"
    write_status(finished, {"status": "finished"})
    encoder = {"conv_0.weight": torch.randn(64, 64)}
    torch.save(encoder, finished / "encoder.pt")
    (finished / "tensorboard").mkdir()
    (finished / "tensorboard" / "events.out").write_bytes(b"events")
    interrupted = work / "results" / "x_acdc" / "pretrain" / "gcl"
    write_status(interrupted, {"status": "interrupted"})
    checkpoint = {
        "model": {"w": torch.randn(128, 64)},
        "optimizer": {"state": {0: {"momentum_buffer": torch.randn(3)}}, "param_groups": [{"lr": 0.1}]},
        "trainer": {"epoch": 3, "iteration": 12},
    }
    torch.save({"model": {"w": torch.zeros(1)}}, interrupted / "checkpoint_epoch=2.pt")
    torch.save(checkpoint, interrupted / "checkpoint_epoch=3.pt")
    model = work / "results" / "x_acdc" / "finetune" / "random_L1_d0_s0"
    write_status(model, {"status": "finished", "trained": True})
    torch.save({"w": torch.randn(10)}, model / "model.pt")
    (model / "eval").mkdir()
    (model / "eval" / "dice.json").write_text("{}")
    # trained, not evaluated yet: its model does not travel, so a fresh machine trains it again
    write_status(
        work / "results" / "x_acdc" / "finetune" / "random_L2_d0_s0", {"status": "interrupted", "trained": True}
    )
    (work / "data").mkdir()
    (work / "data" / "volume.nii.gz").write_bytes(b"data")
    return {
        "encoder": encoder["conv_0.weight"],
        "model": checkpoint["model"]["w"],
        "momentum": checkpoint["optimizer"]["state"][0]["momentum_buffer"],
    }


def test_pack_and_unpack_resume_a_run(tmp_path):
    tensors = _work_with_pretrainings(tmp_path / "work")
    out = tmp_path / "out"
    manifest = pack(tmp_path / "work", out, "# report\n")
    assert returned_violations(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["gpu_run.json", "report.md", f"{ARCHIVE}.00"]
    assert manifest["left_behind"] == []
    packed = manifest["packed"]
    assert "results/x_acdc/pretrain/simclr/encoder.pt" in packed
    assert "results/x_acdc/pretrain/gcl/checkpoint_epoch=3.pt.bf16" in packed  # only the last checkpoint
    assert not any("checkpoint_epoch=2" in p or "model.pt" in p or p.startswith("data/") for p in packed)
    assert "results/x_acdc/finetune/random_L1_d0_s0/eval/dice.json" in packed
    assert json.loads((out / "gpu_run.json").read_text())["returned"] == manifest

    state = unpack(out, tmp_path / "fresh")
    assert state["budget"] == "rehearse"
    fresh = tmp_path / "fresh" / "results" / "x_acdc" / "pretrain"
    assert torch.equal(torch.load(fresh / "simclr" / "encoder.pt")["conv_0.weight"], tensors["encoder"])  # exact
    checkpoint = torch.load(fresh / "gcl" / "checkpoint_epoch=3.pt")
    assert not list(fresh.glob("gcl/*.bf16"))
    assert checkpoint["model"]["w"].dtype == torch.float32 and checkpoint["trainer"] == {"epoch": 3, "iteration": 12}
    assert torch.equal(checkpoint["model"]["w"], tensors["model"].to(torch.bfloat16).float())
    momentum = checkpoint["optimizer"]["state"][0]["momentum_buffer"]
    assert torch.allclose(momentum, tensors["momentum"], rtol=2**-8, atol=0)
    cells = tmp_path / "fresh" / "results" / "x_acdc"
    assert [p.name for p in (cells / "finetune").iterdir()] == ["random_L1_d0_s0"]
    assert [p.name for p in (cells / "discarded").iterdir()] == ["finetune_random_L2_d0_s0"]
    with pytest.raises(ValueError, match="already holds a run"):
        unpack(out, tmp_path / "fresh")
    with pytest.raises(FileNotFoundError, match="no run.tgz"):
        unpack(tmp_path / "work", tmp_path / "other")


def test_pack_counts_what_is_packed_by_its_compressed_bytes(tmp_path):
    _work_with_pretrainings(tmp_path / "work")
    (tmp_path / "work" / "logs").mkdir()
    (tmp_path / "work" / "logs" / "worker.log").write_bytes(b"Epoch complete\n" * 20_000)  # 300 kB, gzip: ~1 kB
    # room for about 24 kB after the fixed files: the log's raw bytes alone are over it, compressed they are not
    terms = SessionTerms(max_files=8, max_file_bytes=16 << 20, max_total_bytes=(64 << 10) + 25_000)
    manifest = pack(tmp_path / "work", tmp_path / "out", "# report\n", terms=terms)
    assert "logs/worker.log" in manifest["packed"]
    assert "results/x_acdc/pretrain/simclr/encoder.pt" in manifest["packed"]  # 16 kB of float32, incompressible
    assert manifest["left_behind"] == ["results/x_acdc/pretrain/gcl/checkpoint_epoch=3.pt.bf16"]
    assert returned_violations(tmp_path / "out", terms) == []


def test_pack_leaves_behind_what_the_terms_have_no_room_for(tmp_path):
    _work_with_pretrainings(tmp_path / "work")
    experiment = tmp_path / "work" / "results" / "x_acdc"
    (experiment / "finetune" / "gcl_L1_d0_s0" / "eval").mkdir(parents=True)  # a cell that loaded an earlier encoder
    (experiment / "finetune" / "gcl_L1_d0_s0" / "eval" / "dice.json").write_text("{}")
    for other in ("gcl_L1_d0_s0_p1", "gcl_frozen_L1_d0_s0"):  # another pre-training seed's, another method's
        write_status(experiment / "finetune" / other, {"status": "finished"})
    # room for the small files and the 16 kB encoder, not also for the bfloat16 checkpoint (16 kB)
    terms = SessionTerms(max_files=8, max_file_bytes=10_000, max_total_bytes=(64 << 10) + 25_000)
    manifest = pack(tmp_path / "work", tmp_path / "out", "# report\n", terms=terms)
    assert manifest["left_behind"] == ["results/x_acdc/pretrain/gcl/checkpoint_epoch=3.pt.bf16"]
    assert len(manifest["parts"]) >= 2  # cut into parts of 10 000 bytes
    assert returned_violations(tmp_path / "out", terms) == []
    unpack(tmp_path / "out", tmp_path / "fresh")
    fresh = tmp_path / "fresh" / "results" / "x_acdc"
    assert (fresh / "pretrain" / "simclr" / "encoder.pt").exists()
    # the pre-training without its checkpoint runs again from scratch, and its method's cells with the new encoder
    assert sorted(p.name for p in (fresh / "pretrain").iterdir()) == ["simclr"]
    assert sorted(p.name for p in (fresh / "finetune").iterdir()) == [
        "gcl_L1_d0_s0_p1",
        "gcl_frozen_L1_d0_s0",
        "random_L1_d0_s0",
    ]
    discarded = sorted(p.name for p in (fresh / "discarded").iterdir())
    assert discarded == ["finetune_gcl_L1_d0_s0", "finetune_random_L2_d0_s0", "pretrain_gcl"]


def test_state_reruns_interrupted_steps_and_retries_a_failed_one_once(tmp_path):
    state = RunState(tmp_path)
    state.create("default", "/data")
    assert state.steps_to_run() == ["speed", "diagnose", "compare"]
    state.update_step("speed", status="done", attempts=1)
    state.update_step("diagnose", status="running", attempts=1)  # the machine went back mid-step
    state.update_step("compare", status="failed", attempts=1)
    assert state.steps_to_run() == ["diagnose", "compare"]
    state.update_step("compare", status="failed", attempts=2)
    assert state.steps_to_run() == ["diagnose"]
    state.update(stopped="collapsed")
    assert state.steps_to_run() == [] and state.finished()


def _summary(verdict, below):
    return {"verdict": verdict, "labels": {name: {"below_chance": b} for name, b in below.items()}}


def test_a_collapse_or_an_image_branch_at_chance_stops_the_run():
    assert "collapsed" in verdict_stops(_summary("collapsed (stalled at chance: patient_id)", {"patient_id": False}))
    stalled = _summary(
        "stalled at chance: patient_id; above chance: organ_state", {"patient_id": False, "organ_state": False}
    )
    assert "no image-wise loss" in verdict_stops(stalled)
    partly = _summary("above chance: organ_state", {"patient_id": True, "organ_state": False})
    assert verdict_stops(partly) == ""
    assert verdict_stops(_summary("training", {"patient_id": True})) == ""


def test_budgets_plan_the_paper_comparison_with_the_papers_recipe(tmp_path):
    paper = PRESETS["paper"]
    for name in ("paper", "default"):
        preset = get_budget(name).preset()
        # the paper's recipe, the pre-training's epochs aside (the default budget's cut, docs/gpu_run.md)
        assert {k: preset.pretrain[k] for k in paper.pretrain if k != "epochs"} == {
            k: v for k, v in paper.pretrain.items() if k != "epochs"
        }
        assert preset.common["features"] == paper.common["features"]
        assert {k: preset.finetune[k] for k in ("batch_size", "lr", "epochs")} == {
            k: paper.finetune[k] for k in ("batch_size", "lr", "epochs")
        }
    assert get_budget("paper").preset().pretrain["epochs"] == paper.pretrain["epochs"]
    assert get_budget("default").preset().pretrain["epochs"] < paper.pretrain["epochs"]
    experiment = Experiment("x", "acdc", get_budget("default").preset(), data_root=tmp_path, results_dir=tmp_path)
    pretrain, finetune = plan_cells(experiment)
    assert sorted(c.method for c in pretrain) == ["gcl", "simclr"]
    assert len(finetune) == 3 * 2 * get_budget("default").repeats
    assert set(BUDGETS) == {"default", "paper", "rehearse"}
    with pytest.raises(ValueError, match="unknown budget"):
        get_budget("fast")


def test_a_gpu_budget_without_data_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GCL_DATA_ROOT"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.gpu_session",
            "--out",
            str(tmp_path / "out"),
            "--work",
            str(tmp_path / "work"),
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode != 0 and "give --data-root or set $GCL_DATA_ROOT" in result.stderr
    assert not (tmp_path / "work").exists()


def _tracked_copy(repo: Path, into: Path) -> Path:
    """A git checkout at ``into`` holding the working-tree version of each file that ``repo`` tracks."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached"], check=True, capture_output=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (repo / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, into / name)
    subprocess.run(["git", "init", "-q", str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "add", "-A"], check=True)
    return into


def test_tracked_copy_leaves_untracked_files_behind(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "a.py").write_text("tracked")
    subprocess.run(["git", "-C", str(repo), "add", "pkg/a.py"], check=True)
    (repo / "pkg" / "a.py").write_text("edited, not committed")
    (repo / ".venv").mkdir()
    (repo / ".venv" / "big").write_bytes(b"x" * 1000)
    copy = _tracked_copy(repo, tmp_path / "copy")
    assert (copy / "pkg" / "a.py").read_text() == "edited, not committed"
    assert not (copy / ".venv").exists() and (copy / ".git").is_dir()
    assert travel_bytes(copy)["tree"] == 4096


@pytest.mark.slow
def test_rehearsal_of_the_gpu_runbook(tmp_path):
    """The whole runbook at tiny sizes: three commands, a machine given back mid-run, a fresh one resuming.

    It runs in a checkout of its own (the files git tracks, copied), so that what travels is what a clean clone
    holds, whatever else lies in the working tree that runs the tests."""
    checkout = _tracked_copy(ROOT, tmp_path / "checkout")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)}
    env.pop("GCL_DATA_ROOT", None)
    result = subprocess.run(
        [sys.executable, "-m", "experiments.gpu_session", "--rehearse", "--out", str(tmp_path / "r")],
        check=False,
        capture_output=True,
        text=True,
        cwd=checkout,
        env=env,
        timeout=1500,
    )
    report = (tmp_path / "r" / "rehearsal.md").read_text()
    assert result.returncode == 0, report + result.stdout[-3000:] + result.stderr[-3000:]
    assert "FAIL" not in report and "**Rehearsal passed.**" in report
    final = tmp_path / "r" / "command-3"
    assert {"gpu_run.json", "report.md", "speed_cpu.json"} <= {p.name for p in final.iterdir()}
    text = (final / "report.md").read_text()
    assert "| compare | done |" in text and "## Comparison" in text and "## Diagnosis of the default recipe" in text


def test_a_checkpoint_replaced_while_packing_is_left_behind_not_fatal(tmp_path, monkeypatch):
    _work_with_pretrainings(tmp_path / "work")

    def replaced(*args, **kwargs):
        raise FileNotFoundError("checkpoint_epoch=3.pt")

    monkeypatch.setattr(torch, "load", replaced)  # the worker removed it after it was listed
    manifest = pack(tmp_path / "work", tmp_path / "out", "# report\n")
    assert manifest["left_behind"] == ["results/x_acdc/pretrain/gcl/checkpoint_epoch=3.pt.bf16"]
    assert "results/x_acdc/pretrain/simclr/encoder.pt" in manifest["packed"]


def test_a_worker_without_data_stops_the_run_with_the_reason(tmp_path):
    from experiments.gpu_session.worker import run_worker

    RunState(tmp_path).create("default", str(tmp_path / "nowhere"))
    assert run_worker(tmp_path) == 1
    state = RunState(tmp_path)
    assert "holds no acdc/ folder" in state.read()["stopped"] and state.finished()
    assert all(step["status"] == "pending" for step in state.read()["steps"].values())


def test_collect_copies_the_results_without_weights(tmp_path):
    from experiments.gpu_session.pack import collect

    work = tmp_path / "work"
    _work_with_pretrainings(work)
    for name in ("results.csv", "table.md"):
        (work / "results" / "x_acdc" / name).write_text(name)
    # the device's checkout, /device/repo, becomes paths relative to the repository
    plan = {"bundle_dir": "/device/repo/bundles", "bundle": "/device/repo/bundles/gcl_acdc"}
    (work / "results" / "x_acdc" / "plan.json").write_text(json.dumps(plan))
    (work / "diagnose").mkdir()
    (work / "diagnose" / "report.md").write_text("# Diagnosis: /device/repo/bundles/gcl_acdc/configs/pretrain.json")
    (work / "speed_cuda.json").write_text("{}")
    pack(work, tmp_path / "out", "# report\n", extra=[work / "speed_cuda.json"])
    written = collect(tmp_path / "out", tmp_path / "docs")
    names = sorted(p.name for p in written)
    assert names == [
        "diagnosis.md",
        "gpu_run.json",
        "plan.json",
        "report.md",
        "results.csv",
        "speed_cuda.json",
        "table.md",
    ]
    assert (tmp_path / "docs" / "table.md").read_text() == "table.md"
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == names
    assert json.loads((tmp_path / "docs" / "plan.json").read_text())["bundle"] == "bundles/gcl_acdc"
    assert (tmp_path / "docs" / "diagnosis.md").read_text() == "# Diagnosis: bundles/gcl_acdc/configs/pretrain.json"


def test_speed_lines_give_the_pretraining_time_at_the_measured_speed():
    from experiments.gpu_session.summary import speed_lines

    variant = {"median_s": 0.1, "ratio_to_simclr": 5.0, "combine_share": 0.25, "grad_filter_share": 0.2}
    speed = {
        "device": "H100",
        "variants": {
            "simclr": {**variant, "median_s": 0.02},
            "gcl": variant,
            "gcl_views_on_device": {**variant, "median_s": 0.13},
        },
        "gcl_consumption_slices_per_s": 240.0,
        "pipeline_slices_per_s": {"bundle": 480.0},
    }
    lines = speed_lines(speed, pretrain_epochs=100)
    assert "full GCL 0.1000 s: 5.00x (target <= 2.5x)" in lines[1]
    # 880 / 48 iterations per epoch x (0.13 + 0.02) s = 2.75 s; 100 epochs = 4.6 min
    assert "100 epochs x 2.75 s = 4.6 min of GPU time" in lines[3]
    assert lines[4] == "- data pipeline (bundle): 480 slices/s, 2.00x what full GCL consumes (target >= 1.5x)"


def test_split_files_follow_the_data_to_another_machine(tmp_path):
    from experiments.gpu_session.steps import relocate_splits

    old, new = tmp_path / "a" / "acdc", tmp_path / "b" / "acdc"
    (new / "training").mkdir(parents=True)
    (new / "training" / "p1.nii.gz").write_bytes(b"x")
    split = {"pretrain": [{"image": f"{old}/training/p1.nii.gz", "patient": "p1", "organ_state": 0}]}
    path = tmp_path / "work" / "results" / "x_acdc" / "split.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(split))
    assert relocate_splits(tmp_path / "work", str(old), str(new)) == [path]
    moved = json.loads(path.read_text())["pretrain"][0]
    assert moved == {"image": f"{new}/training/p1.nii.gz", "patient": "p1", "organ_state": 0}
    # a payload cut to the fine-tuning's patients: a pre-training patient may be missing, a test patient may not
    split["pretrain"][0]["label"] = f"{old}/training/p1_gt.nii.gz"  # not on the new machine
    split["test"] = [{"image": f"{old}/training/p1.nii.gz", "label": f"{old}/training/p1_gt.nii.gz"}]
    path.write_text(json.dumps(split))
    with pytest.raises(FileNotFoundError, match="p1_gt.nii.gz is not in this machine's data"):
        relocate_splits(tmp_path / "work", str(old), str(new))
    del split["test"]
    path.write_text(json.dumps(split))
    relocate_splits(tmp_path / "work", str(old), str(new))
    assert json.loads(path.read_text())["pretrain"][0]["label"] == f"{new}/training/p1_gt.nii.gz"


def test_repack_leaves_behind_the_weights_a_carry_has_no_room_for(tmp_path):
    from experiments.gpu_session.pack import repack

    _work_with_pretrainings(tmp_path / "work")
    pack(tmp_path / "work", tmp_path / "out", "# report\n")
    manifest = repack(tmp_path / "out", tmp_path / "carry", max_bytes=70 << 10)  # the small files only
    assert sorted(manifest["left_behind"]) == [
        "results/x_acdc/pretrain/gcl/checkpoint_epoch=3.pt.bf16",
        "results/x_acdc/pretrain/simclr/encoder.pt.bf16",  # a carry's encoders are bfloat16
    ]
    assert (tmp_path / "carry" / "report.md").read_text() == "# report\n"
    carried = json.loads((tmp_path / "carry" / "gpu_run.json").read_text())["returned"]
    assert not any("pretrain/" in p or "discarded" in p for p in carried["packed"])  # their scalars stay behind too
    assert "results/x_acdc/finetune/random_L1_d0_s0/eval/dice.json" in carried["packed"]
    unpack(tmp_path / "carry", tmp_path / "fresh")
    fresh = tmp_path / "fresh" / "results" / "x_acdc"
    assert not (fresh / "pretrain").exists()  # both pre-train again
    assert sorted(p.name for p in (fresh / "finetune").iterdir()) == ["random_L1_d0_s0"]


def _small_checkout(root: Path) -> Path:
    """A git checkout of two small tracked files, beside an ignored large one: its room does not depend on what else
    lies in the working tree that runs the tests (a virtual environment, caches, outputs)."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text(".venv/\n")
    (root / "README.md").write_bytes(b"x" * 10_000)
    (root / ".venv").mkdir()
    (root / ".venv" / "torch.so").write_bytes(b"x" * 2_000_000)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    return root


def test_make_carry_replaces_only_an_earlier_carry(tmp_path, capsys, monkeypatch):
    from experiments.gpu_session import steps
    from experiments.gpu_session.cli import carry_room, main_gpu_run

    checkout = _small_checkout(tmp_path / "checkout")
    monkeypatch.setattr(steps, "checkout_root", lambda: checkout)
    # the two tracked files, in whole blocks (the ignored .venv/ does not travel), and the 1 MiB margin
    assert carry_room() == TERMS.tree_bytes - 4 * 4096 - 1024 * 1024
    _work_with_pretrainings(tmp_path / "work")
    pack(tmp_path / "work", tmp_path / "out", "# report\n")
    carry = tmp_path / "carry"
    assert main_gpu_run(["--make-carry", str(tmp_path / "out"), "--out", str(carry)]) == 0
    assert "left behind (run again there): nothing" in capsys.readouterr().out  # tiny weights fit
    # the finished encoder travels as bfloat16 (half the bytes) and is float32 again on the fresh machine
    packed = json.loads((carry / "gpu_run.json").read_text())["returned"]["packed"]
    assert "results/x_acdc/pretrain/simclr/encoder.pt.bf16" in packed
    unpack(carry, tmp_path / "fresh")
    restored = torch.load(tmp_path / "fresh" / "results" / "x_acdc" / "pretrain" / "simclr" / "encoder.pt")
    original = torch.load(tmp_path / "work" / "results" / "x_acdc" / "pretrain" / "simclr" / "encoder.pt")
    assert restored["conv_0.weight"].dtype == torch.float32
    assert torch.equal(restored["conv_0.weight"], original["conv_0.weight"].to(torch.bfloat16).float())
    assert not torch.equal(restored["conv_0.weight"], original["conv_0.weight"])
    assert main_gpu_run(["--make-carry", str(tmp_path / "out"), "--out", str(carry)]) == 0  # replaced
    assert returned_violations(carry) == []
    (carry / "notes.md").write_text("mine")
    with pytest.raises(SystemExit, match=r"holds other files than a carry \(notes.md\)"):
        main_gpu_run(["--make-carry", str(tmp_path / "out"), "--out", str(carry)])
    assert (carry / "notes.md").exists()


def test_the_default_plan_takes_two_gpu_sessions_and_the_papers_pretraining_fits_none():
    """15 minutes of device time per session, start-up included, 15% kept free (experiments.gpu_session.sessions)."""
    assert TERMS.device_seconds == 15 * 60 and TERMS.command_seconds == 10 * 60
    default = plan_sessions(get_budget("default"))
    assert len(default) == 2 and all(session.fits() for session in default)
    # the first session holds both pre-trainings (they cannot resume on another machine at the paper's width)
    first = dict(default[0].parts)
    # 18.3 iterations x (0.112 + 0.022) s x 1.05 = 2.58 s per epoch, 1.25 times beside the cells
    pretraining = 80 * 878 / 48 * 0.134 * 1.05 * 1.25
    assert first["pre-training simclr and gcl, 80 epochs"] == pytest.approx(pretraining)
    # a cell: 300 epochs x 4 (L = 1) or 8 (L = 2) batches of 6.8 ms (session 2, 8 cells at once), and 15 s / 8
    l1, l2 = 300 * 4 * 0.0068 + 15 / 8, 300 * 8 * 0.0068 + 15 / 8
    # random-init cells fill the first session after the pre-trainings, beside them: 1.25 times
    assert first["10 random cells (6 at L = 1, 4 at L = 2)"] == pytest.approx(1.25 * (6 * l1 + 4 * l2))
    assert default[0].seconds == pytest.approx(110 + 67 + 86 + pretraining + 1.25 * (6 * l1 + 4 * l2) + 60)
    # the first session holds no cell more than the 15% margin allows, and the next cell would not have fitted
    room = 0.85 * 900 - 110 - 60
    used = default[0].seconds - 170
    assert used <= room < used + 1.25 * l2
    # the second session: the cells left, alone on the GPU
    assert dict(default[1].parts)["12 gcl cells (6 at L = 1, 6 at L = 2)"] == pytest.approx(6 * l1 + 6 * l2)
    cells = [what for session in default for what, _ in session.parts if "cells" in what]
    assert sum(int(what.split()[0]) for what in cells) == 36  # 3 methods x L = 1, 2 x 6 draws, each once
    paper = plan_sessions(get_budget("paper"))
    assert not paper[0].fits() and paper[0].seconds > TERMS.device_seconds
    assert not any("cells" in what for what, _ in paper[0].parts)  # nothing joins a session already over
    table = format_plan(get_budget("default"))
    assert table.count("fits with 15% kept free") == 2 and "DOES NOT FIT" not in table
    assert "DOES NOT FIT" in format_plan(get_budget("paper"))
    from experiments.gpu_session.cli import main_gpu_run

    assert main_gpu_run(["--plan"]) == 0 and main_gpu_run(["--plan", "--budget", "paper"]) == 1


def test_a_further_pretraining_seed_reruns_the_pretrained_methods_on_the_same_draws(tmp_path):
    """``--pretrain-seed 1``: budget default-p1, SimCLR and GCL pre-trained with seed 1 and fine-tuned with the same
    overrides as seed 0's cells but their encoder; no random-init cell, no speed or diagnosis; one session."""
    seeded = get_budget("default-p1")
    assert seeded == BUDGETS["default"].with_pretrain_seed(1)
    assert seeded.methods == ("simclr", "gcl") and seeded.steps == ("compare",)
    with pytest.raises(ValueError, match=">= 1"):
        BUDGETS["default"].with_pretrain_seed(0)
    with pytest.raises(ValueError, match="unknown budget"):
        get_budget("nobudget-p1")

    def cells(budget):
        experiment = Experiment("gpu", "acdc", budget.preset(), results_dir=tmp_path)
        pretrain, finetune = plan_cells(experiment)
        return {c.name: c for c in pretrain}, {c.folder.name: c for c in finetune}

    (pre0, fine0), (pre1, fine1) = cells(BUDGETS["default"]), cells(seeded)
    assert sorted(pre0) == ["gcl", "simclr"] and sorted(pre1) == ["gcl_p1", "simclr_p1"]
    assert pre1["gcl_p1"].overrides["seed"] == 1
    assert {c.method for c in fine1.values()} == {"simclr", "gcl"} and len(fine1) == 24
    for name, cell in fine1.items():
        base = fine0[name.removesuffix("_p1")]
        assert cell.pretrain_seed == 1 and base.pretrain_seed == 0
        different = {k for k in cell.train_overrides if cell.train_overrides[k] != base.train_overrides.get(k)}
        assert different == {"pretrained_path", "output_dir", "ckpt_dir"}  # the same draw, seeds and recipe
        assert f"{cell.method}_p1" in cell.train_overrides["pretrained_path"]

    # measured on its first session (docs/results/gpu-default-p1_acdc): two sessions with 15% kept free; SimCLR's cells
    # share the GPU with GCL's pre-training (1.25 times), GCL's wait for it
    session = plan_sessions(seeded)
    assert len(session) == 2 and all(one.fits() for one in session)
    parts = dict(session[0].parts)
    assert "speed" not in parts and "diagnose" not in parts and not any("random" in what for what in parts)
    l1, l2 = 300 * 4 * 0.0068 + 15 / 8, 300 * 8 * 0.0068 + 15 / 8
    assert parts["12 simclr cells (6 at L = 1, 6 at L = 2)"] == pytest.approx(1.25 * (6 * l1 + 6 * l2))
    assert parts["9 gcl cells (6 at L = 1, 3 at L = 2)"] == pytest.approx(6 * l1 + 3 * l2)

    state = RunState(tmp_path / "work")
    state.create(seeded.name, None, seeded.steps)
    assert state.steps_to_run() == ["compare"] and state.read()["steps"]["speed"]["status"] == "skipped"


@pytest.mark.parametrize("wait", ["511", "600", "-1"])
def test_a_wait_that_leaves_no_time_to_pack_is_refused(wait, capsys):
    from experiments.gpu_session.cli import main_gpu_run

    with pytest.raises(SystemExit):
        main_gpu_run(["--out", "out", "--wait", wait])
    assert f"--wait {float(wait):g}: give 0 to 510 s" in capsys.readouterr().err


def test_the_session_terms_are_options_whose_defaults_are_the_dataclass():
    from experiments.gpu_session.cli import parser

    assert SessionTerms.from_options(parser().parse_args([])) == TERMS
    terms = SessionTerms.from_options(parser().parse_args(["--tree-bytes", "1000", "--max-files", "3"]))
    assert (terms.tree_bytes, terms.max_files, terms.device_seconds) == (1000, 3, TERMS.device_seconds)
    # another call (the rehearsal's commands) gets the same terms back from the options they print
    assert terms.as_options() == ["--max-files", "3", "--tree-bytes", "1000"]
    assert SessionTerms.from_options(parser().parse_args(terms.as_options())) == terms
    assert TERMS.as_options() == [] and TERMS.max_wait == TERMS.command_seconds - TERMS.pack_seconds == 510


def test_a_session_option_changes_the_limit_that_the_plan_and_the_wait_apply(capsys):
    from experiments.gpu_session.cli import main_gpu_run

    assert main_gpu_run(["--plan"]) == 0
    assert main_gpu_run(["--plan", "--device-seconds", "300"]) == 1  # no session of the default budget fits 255 s
    assert "of 300" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # 200 s per command less 90 for packing leaves a wait of at most 110 s
        main_gpu_run(["--out", "out", "--wait", "150", "--command-seconds", "200"])
    assert "--wait 150: give 0 to 110 s; a call packs for about 90 s" in capsys.readouterr().err


def test_a_session_option_changes_the_limits_that_packing_applies(tmp_path, capsys, monkeypatch):
    from experiments.gpu_session import steps
    from experiments.gpu_session.cli import main_gpu_run

    checkout = _small_checkout(tmp_path / "checkout")
    monkeypatch.setattr(steps, "checkout_root", lambda: checkout)
    _work_with_pretrainings(tmp_path / "work")
    pack(tmp_path / "work", tmp_path / "out", "# report\n")
    # the carry's room is what --tree-bytes leaves beside the checkout (4 blocks) and the 1 MiB margin
    with pytest.raises(SystemExit, match="no room to carry anything"):
        main_gpu_run(["--make-carry", str(tmp_path / "out"), "--out", str(tmp_path / "c0"), "--tree-bytes", "1000000"])
    assert main_gpu_run(["--make-carry", str(tmp_path / "out"), "--out", str(tmp_path / "c1")]) == 0
    one = sorted(p.name for p in (tmp_path / "c1").glob(f"{ARCHIVE}.*"))
    small = ["--max-file-bytes", "2000"]
    assert main_gpu_run(["--make-carry", str(tmp_path / "out"), "--out", str(tmp_path / "c2"), *small]) == 0
    parts = sorted((tmp_path / "c2").glob(f"{ARCHIVE}.*"))
    assert len(parts) > len(one) and all(p.stat().st_size <= 2000 for p in parts)
    assert returned_violations(tmp_path / "c2", SessionTerms(max_file_bytes=2000)) == []
