"""atomic_write: the file appears whole, an error leaves the old one and no partial behind."""

from __future__ import annotations

import os

import pytest

from gcl_monai.utils import atomic_write


def test_replaces_the_file_in_one_move(tmp_path):
    path = tmp_path / "new" / "status.json"  # parent folders are created
    with atomic_write(path) as partial:
        assert partial.parent == path.parent and partial.name == f".status.json.{os.getpid()}.tmp"
        partial.write_text("first")
        assert not path.exists()  # nothing appears before the block ends
    assert path.read_text() == "first"
    with atomic_write(path) as partial:
        partial.write_text("second")
        assert path.read_text() == "first"  # a reader sees the old file while the new one is written
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["status.json"]


def test_an_error_keeps_the_old_file_and_removes_the_partial(tmp_path):
    path = tmp_path / "encoder.pt"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="cut off"), atomic_write(path) as partial:
        partial.write_text("half of the ne")
        raise RuntimeError("cut off")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["encoder.pt"]


def test_a_folder_and_a_leftover_partial(tmp_path):
    folder = tmp_path / "cell"
    stale = tmp_path / f".cell.{os.getpid()}.tmp"  # left by a run of this process id that was killed
    (stale / "old").mkdir(parents=True)
    with atomic_write(folder) as partial:
        assert not partial.exists()  # the stale partial is cleared first
        (partial / "models").mkdir(parents=True)
    assert (folder / "models").is_dir() and not stale.exists()
    with pytest.raises(ValueError), atomic_write(tmp_path / "other") as partial:
        (partial / "a").mkdir(parents=True)
        raise ValueError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell"]


def test_suffix_keeps_the_extension_for_writers_that_choose_by_name(tmp_path):
    with atomic_write(tmp_path / "case.nii.gz", suffix=".nii.gz") as partial:
        assert partial.name.endswith(".nii.gz")
        partial.write_bytes(b"x")
    assert (tmp_path / "case.nii.gz").read_bytes() == b"x"
