"""experiments.gpu_session.records by hand: which files are records, the paths made relative to the checkout that ran
the experiment, and a restore that never writes over a run's folder. (The whole round trip on the phantom, a rerun
going on from restored records: tests/experiments/test_benchmark.py.)"""

import json

import pytest

from experiments.gpu_session.records import keep, record_files, restore


def _experiment(root, checkout, data_root):
    folder = root / "results" / "run"
    plan = {"bundle_dir": f"{checkout}/bundles", "data_root": str(data_root), "test_root": None}
    (folder / "finetune" / "random_L1_d0_s0" / "eval").mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps(plan))
    (folder / "split.json").write_text(json.dumps({"test": [{"image": f"{data_root}/acdc/p1.h5#image"}]}))
    cell = folder / "finetune" / "random_L1_d0_s0"
    (cell / "benchmark.json").write_text(json.dumps({"status": "finished", "dir": f"{checkout}/results/run"}))
    (cell / "eval" / "dice.json").write_text('{"dice": 0.5}')
    (cell / "model.pt").write_bytes(b"weights")
    (cell / "benchmark.json.tmp").write_text("{}")
    (cell / "events.out.tfevents.1.vm.1.0").write_bytes(b"scalars")
    (folder / "pretrain" / "gcl").mkdir(parents=True)
    (folder / "pretrain" / "gcl" / "probe_history.jsonl").write_text('{"epoch": 20, "dice": 0.5, "seconds": 170}\n')
    (folder / "pretrain" / "gcl" / "encoder.pt").write_bytes(b"weights")
    return folder


def test_keep_copies_the_text_records_with_paths_relative_to_the_checkout(tmp_path):
    checkout = tmp_path / "machine" / "checkout"
    folder = _experiment(tmp_path / "machine" / "checkout", checkout, tmp_path / "machine" / "shared" / "data")
    kept = tmp_path / "kept"
    assert keep(folder, kept) == 5
    names = sorted(p.relative_to(kept).as_posix() for p in record_files(kept))
    assert names == [
        "finetune/random_L1_d0_s0/benchmark.json",
        "finetune/random_L1_d0_s0/eval/dice.json",
        "plan.json",
        "pretrain/gcl/probe_history.jsonl",
        "split.json",
    ]
    assert json.loads((kept / "split.json").read_text())["test"][0]["image"] == "../shared/data/acdc/p1.h5#image"
    assert json.loads((kept / "plan.json").read_text())["bundle_dir"] == "bundles"
    assert json.loads((kept / "finetune/random_L1_d0_s0/benchmark.json").read_text())["dir"] == "results/run"


def test_a_data_root_inside_the_checkout_is_made_relative_as_a_whole(tmp_path):
    checkout = tmp_path / "checkout"
    folder = _experiment(checkout, checkout, checkout / "data")
    keep(folder, tmp_path / "kept")
    assert json.loads((tmp_path / "kept" / "split.json").read_text())["test"][0]["image"] == "data/acdc/p1.h5#image"


def test_restore_fills_only_an_empty_folder_and_keep_needs_an_experiment(tmp_path):
    folder = _experiment(tmp_path / "a", tmp_path / "a", tmp_path / "data")
    keep(folder, tmp_path / "kept")
    with pytest.raises(FileExistsError, match="not empty"):
        restore(tmp_path / "kept", folder)
    assert restore(tmp_path / "kept", tmp_path / "b" / "run") == 5
    assert (
        tmp_path / "b" / "run" / "finetune" / "random_L1_d0_s0" / "eval" / "dice.json"
    ).read_text() == '{"dice": 0.5}'
    with pytest.raises(FileNotFoundError, match="holds no plan.json"):
        keep(tmp_path / "b" / "run" / "finetune", tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError, match="no experiment's records"):
        restore(tmp_path / "nothing", tmp_path / "c")


def test_records_kept_in_one_archive_restore_as_from_a_folder(tmp_path):
    folder = _experiment(tmp_path / "machine", tmp_path / "machine", tmp_path / "data")
    archive = tmp_path / "kept" / "run.tar.xz"
    assert keep(folder, archive) == 5
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["run.tar.xz"]  # one file, no partial left
    # a cell finished later is added; what the archive held and the experiment no longer has is kept
    (folder / "finetune" / "random_L1_d0_s0" / "eval" / "dice.json").unlink()
    later = folder / "finetune" / "gcl_L1_d0_s0"
    later.mkdir()
    (later / "benchmark.json").write_text('{"status": "finished"}')
    assert keep(folder, archive) == 5
    assert restore(archive, tmp_path / "b" / "run") == 6
    restored = tmp_path / "b" / "run"
    assert (restored / "finetune" / "random_L1_d0_s0" / "eval" / "dice.json").read_text() == '{"dice": 0.5}'
    assert (restored / "finetune" / "gcl_L1_d0_s0" / "benchmark.json").read_text() == '{"status": "finished"}'
    assert json.loads((restored / "plan.json").read_text())["bundle_dir"] == "bundles"
    assert not (restored / "pretrain" / "gcl" / "encoder.pt").exists()
    with pytest.raises(FileExistsError, match="not empty"):
        restore(archive, restored)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        restore(tmp_path / "kept" / "other.tar.xz", tmp_path / "c")


def test_keep_with_encoders_keeps_each_finished_pre_training_as_a_card_once(tmp_path, capsys):
    import torch

    from experiments.__main__ import main
    from experiments.status import write_status
    from gcl_monai.networks import GCLNet, restore_encoder

    features = (8, 8, 16, 16, 32, 8)
    folder = _experiment(tmp_path / "machine", tmp_path / "machine", tmp_path / "data")
    plan = json.loads((folder / "plan.json").read_text())
    (folder / "plan.json").write_text(json.dumps({**plan, "preset": {"name": "cpu-converged", "repeats": 8}}))
    torch.manual_seed(0)
    encoder = GCLNet(spatial_dims=2, features=features).encoder_state_dict()
    for name, status in (("gcl_p1", "finished"), ("simclr", "interrupted")):
        write_status(folder / "pretrain" / name, {"status": status})
        torch.save(encoder, folder / "pretrain" / name / "encoder.pt")
    into = tmp_path / "docs" / "encoders"
    argv = ["keep", str(folder), str(tmp_path / "kept.tar.xz"), "--encoders", str(into)]
    assert main(argv) == 0
    assert f"keep: 1 encoders of {folder} in {into}" in capsys.readouterr().out
    assert sorted(p.name for p in into.iterdir()) == ["gcl_p1.json", "gcl_p1.pt"]  # the unfinished one: no card
    card = json.loads((into / "gcl_p1.json").read_text())
    assert (card["recipe"], card["seed"], card["budget"], card["experiment"]) == ("gcl", 1, "cpu-converged", "run")
    assert card["stored_dtype"] == "bfloat16" and card["commit"] is None  # the checkout here is no git checkout
    restored = restore_encoder(into / "gcl_p1.json", features=features, in_channels=1)
    assert all(torch.allclose(restored[k], v, rtol=2**-8, atol=1e-30) for k, v in encoder.items())
    written = (into / "gcl_p1.pt").stat().st_mtime_ns
    assert main(argv) == 0 and (into / "gcl_p1.pt").stat().st_mtime_ns == written  # the same encoder: kept once
