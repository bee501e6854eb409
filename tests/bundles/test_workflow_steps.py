"""The named workflow steps the bundle configs call instead of lambdas and statements."""

import pytest
import torch
from monai.data import MetaTensor

from gcl_monai.bundle import as_floats, attach_all, every, image_meta, print_summary, release_model


def test_every_filters_iterations():
    keep = every(25)
    assert [i for i in range(1, 101) if keep(None, i)] == [25, 50, 75, 100]
    with pytest.raises(ValueError, match="n must be >= 1"):
        every(0)


def test_as_floats_and_image_meta():
    assert as_floats({"loss": torch.tensor(0.5), "img": torch.tensor([2.0])}) == {"loss": 0.5, "img": 2.0}
    batch = [{"image": MetaTensor(torch.zeros(1), meta={"filename_or_obj": f"{i}.nii"})} for i in range(2)]
    assert [m["filename_or_obj"] for m in image_meta(batch)] == ["0.nii", "1.nii"]


def test_attach_all_attaches_each_handler_once():
    seen = []

    class Handler:
        def __init__(self, name):
            self.name = name

        def attach(self, engine):
            seen.append((self.name, engine))

    attach_all([Handler("a"), Handler("b")], "engine")
    assert seen == [("a", "engine"), ("b", "engine")]


def test_release_model_copies_the_kept_model_and_names_a_missing_one(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model.pt").write_bytes(b"weights")
    target = release_model(tmp_path / "run", tmp_path / "models")
    assert target.read_bytes() == b"weights"
    assert release_model(tmp_path / "run", tmp_path / "run").read_bytes() == b"weights"  # the same file: kept
    with pytest.raises(FileNotFoundError, match=r"empty/model\.pt does not exist"):
        release_model(tmp_path / "empty", tmp_path / "models")


def test_print_summary_leaves_out_the_rows(capsys):
    print_summary({"dice": 0.8, "per_volume": [1, 2]})
    assert capsys.readouterr().out.strip() == '{\n "dice": 0.8\n}'
