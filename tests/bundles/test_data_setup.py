"""The data a bundle sets up (gcl_monai.bundle.data_setup): the split file written once, the dataset folder's layout
checked only while there is no split file, and the phantom generated once, again when its settings change."""

import json

import pytest

from gcl_monai.bundle import check_dataset_dir, ensure_phantom, load_or_create_split
from gcl_monai.data import DatalistError, detect_layout


def test_the_folder_is_checked_until_a_split_file_names_every_file(tmp_path):
    split_file = tmp_path / "split.json"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no dataset here")
    with pytest.raises(DatalistError, match="matches no known dataset layout"):
        check_dataset_dir(split_file, tmp_path / "notes")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_dataset_dir(split_file, tmp_path / "nowhere")
    phantom = ensure_phantom(tmp_path / "phantom", num_patients=2, image_size=32)
    check_dataset_dir(split_file, phantom, "acdc")  # a readable layout passes
    with pytest.raises(DatalistError, match="matches no known prostate layout"):
        check_dataset_dir(split_file, phantom, "prostate")
    split_file.write_text("{}")
    check_dataset_dir(split_file, tmp_path / "nowhere")  # the split exists: the folder is not read


def test_the_phantom_is_generated_again_when_its_settings_change(tmp_path):
    folder = ensure_phantom(tmp_path / "phantom", num_patients=2, seed=0, image_size=32)
    assert detect_layout(folder) == ("acdc", "official")
    patients = sorted(p.name for p in (tmp_path / "phantom").rglob("patient*") if p.is_dir())
    assert len(patients) == 2
    assert ensure_phantom(tmp_path / "phantom", num_patients=3, seed=1, image_size=32) == folder
    assert (tmp_path / "phantom" / ".complete").read_text() == "3 1 32"
    assert len([p for p in (tmp_path / "phantom").rglob("patient*") if p.is_dir()]) == 3
    (tmp_path / "phantom" / ".complete").unlink()  # an interrupted generation (no marker) is redone
    ensure_phantom(tmp_path / "phantom", num_patients=3, seed=1, image_size=32)
    assert (tmp_path / "phantom" / ".complete").read_text() == "3 1 32"


def test_phantom_is_generated_once_and_the_split_written_once(tmp_path):
    folder = ensure_phantom(tmp_path / "phantom", num_patients=4, seed=0, image_size=32)
    marker = tmp_path / "phantom" / ".complete"
    assert marker.read_text() == "4 0 32"
    stamp = marker.stat().st_mtime_ns
    assert ensure_phantom(tmp_path / "phantom", num_patients=4, seed=0, image_size=32) == folder
    assert marker.stat().st_mtime_ns == stamp  # not regenerated
    split_file = tmp_path / "split.json"
    split = load_or_create_split(split_file, folder, dataset="acdc", num_pretrain=1, num_val=1, num_test=1)
    assert split_file.is_file()
    patients = {k: {item["patient"] for item in v} for k, v in split.items()}
    assert {k: len(p) for k, p in patients.items()} == {"pretrain": 1, "train": 1, "val": 1, "test": 1}
    assert len(set().union(*patients.values())) == 4
    # the folder is not read again once the split exists: a missing folder does not matter
    again = load_or_create_split(split_file, tmp_path / "nowhere")
    assert json.dumps(again, sort_keys=True) == json.dumps(split, sort_keys=True)
