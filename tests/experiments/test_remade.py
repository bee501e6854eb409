"""A pre-training made again with other bytes: its new encoder taken, the first encoder's cells set aside, by hand."""

import shutil
from pathlib import Path

import pytest

from experiments.experiment import FinetuneCell, PretrainCell
from experiments.fingerprints import ENCODER_HASH_KEY, OTHER_BYTES_HASH_KEY, encoder_hash
from experiments.gpu_session.remade import DISCARDED, REPLACED_HASH_KEY, replace_encoder, set_aside
from experiments.status import read_status, write_status


def _pretraining(experiment: Path, method: str, seed: int = 0) -> PretrainCell:
    cell = PretrainCell(method, Path("bundle"), {"work_dir": str(experiment)}, seed=seed)
    cell.folder.mkdir(parents=True)
    return cell


def _cell(experiment: Path, name: str, pretraining: PretrainCell | None) -> FinetuneCell:
    folder = experiment / "finetune" / name
    folder.mkdir(parents=True)
    write_status(folder, {"status": "finished", "cell": name})
    return FinetuneCell(
        method=name.split("_")[0],
        num_labeled=2,
        draw=0,
        seed=0,
        repeat=0,
        bundle=Path("bundle"),
        train_overrides={"output_dir": str(folder)},
        eval_overrides={"val": {"eval_dir": str(folder / "eval")}},
        pretrain=pretraining,
        dataset="acdc",
        pretrain_dataset="acdc" if pretraining else None,
        preset="p",
    )


def test_set_aside_moves_a_folder_to_discarded_and_numbers_a_name_taken(tmp_path):
    experiment = tmp_path / "run"
    first = experiment / "finetune" / "gcl_L2_d0_s0"
    first.mkdir(parents=True)
    (first / "a.txt").write_text("first")
    assert set_aside(first) == experiment / DISCARDED / "finetune_gcl_L2_d0_s0"
    assert not first.exists()
    first.mkdir()
    (first / "a.txt").write_text("second")
    assert set_aside(first) == experiment / DISCARDED / "finetune_gcl_L2_d0_s0.1"
    assert (experiment / DISCARDED / "finetune_gcl_L2_d0_s0" / "a.txt").read_text() == "first"  # nothing lost
    assert (experiment / DISCARDED / "finetune_gcl_L2_d0_s0.1" / "a.txt").read_text() == "second"
    assert set_aside(first) is None


def test_the_new_encoder_is_taken_and_only_the_cells_that_loaded_the_first_are_set_aside(tmp_path):
    experiment = tmp_path / "run"
    gcl, gcl_p1 = _pretraining(experiment, "gcl"), _pretraining(experiment, "gcl", seed=1)
    (gcl.folder / "encoder.pt").write_bytes(b"the encoder made again")
    made = encoder_hash(gcl.folder / "encoder.pt")
    failed = {
        "status": "failed",
        "epochs": 20,
        "message": "differs",
        ENCODER_HASH_KEY: "a" * 64,
        OTHER_BYTES_HASH_KEY: made,
    }
    write_status(gcl.folder, failed)
    ours = _cell(experiment, "gcl_L2_d0_s0", gcl)
    other_seed = _cell(experiment, "gcl_L2_d0_s0_p1", gcl_p1)
    random = _cell(experiment, "random_L2_d0_s0", None)
    never_ran = _cell(experiment, "gcl_L2_d1_s1", gcl)
    shutil.rmtree(never_ran.folder)

    moved = replace_encoder(gcl, [ours, other_seed, random, never_ran])

    assert moved == [experiment / DISCARDED / "finetune_gcl_L2_d0_s0"]
    assert read_status(moved[0]) == {"status": "finished", "cell": "gcl_L2_d0_s0"}
    assert not ours.folder.exists() and other_seed.folder.exists() and random.folder.exists()
    status = read_status(gcl.folder)
    assert status == {"status": "finished", "epochs": 20, ENCODER_HASH_KEY: made, REPLACED_HASH_KEY: "a" * 64}


def test_an_encoder_is_taken_only_when_its_status_and_its_bytes_say_it_was_made_again(tmp_path):
    experiment = tmp_path / "run"
    gcl = _pretraining(experiment, "gcl")
    encoder = gcl.folder / "encoder.pt"
    encoder.write_bytes(b"made again")
    write_status(gcl.folder, {"status": "finished", ENCODER_HASH_KEY: encoder_hash(encoder)})
    with pytest.raises(ValueError, match="no encoder made again"):
        replace_encoder(gcl, [])
    write_status(gcl.folder, {"status": "failed", ENCODER_HASH_KEY: "a" * 64, OTHER_BYTES_HASH_KEY: "b" * 64})
    with pytest.raises(ValueError, match=f"{encoder} is not the encoder made again"):
        replace_encoder(gcl, [])
    encoder.unlink()
    with pytest.raises(ValueError, match="is not the encoder made again"):
        replace_encoder(gcl, [])
    assert read_status(gcl.folder)["status"] == "failed"
