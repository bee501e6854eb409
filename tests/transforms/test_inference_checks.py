"""What inference checks of each case before the network sees it (gcl_monai.transforms.inference_checks): one frame
of a 4D series chosen or asked for by name, non-finite voxels repaired with a warning or the case refused."""

import logging

import pytest
import torch
from monai.data import MetaTensor

from gcl_monai.transforms import RepairNonFinited, SelectFramed


def test_select_frame():
    cine = MetaTensor(
        torch.arange(3 * 2 * 2 * 2, dtype=torch.float32).reshape(3, 2, 2, 2),
        meta={"filename_or_obj": "/d/p1_4d.nii.gz"},
    )
    out = SelectFramed("image")({"image": cine, "frame": 1})["image"]
    assert torch.equal(out, cine[1:2]) and out.meta["filename_or_obj"] == "/d/p1_4d_frame01.nii.gz"
    assert cine.meta["filename_or_obj"] == "/d/p1_4d.nii.gz"
    assert torch.equal(SelectFramed("image", frame=2)({"image": cine})["image"], cine[2:3])
    with pytest.raises(ValueError, match=r"p1_4d\.nii\.gz: 3 frames.*--frame 0"):
        SelectFramed("image")({"image": cine})
    with pytest.raises(ValueError, match=r"p1_4d\.nii\.gz: frame 5 requested, the image has 3"):
        SelectFramed("image")({"image": cine, "frame": 5})
    volume = cine[:1]
    assert SelectFramed("image")({"image": volume})["image"] is volume


def test_non_finite_voxels_are_repaired_with_a_warning_or_refused(caplog):
    image = MetaTensor(torch.tensor([[[[1.0, float("nan")], [3.0, float("inf")]]]]), meta={"filename_or_obj": "x.nii"})
    with caplog.at_level(logging.WARNING, logger="gcl_monai.transforms"):
        out = RepairNonFinited("image")({"image": image})["image"]
    assert out.flatten().tolist() == [1.0, 1.0, 3.0, 1.0]
    assert "x.nii: 2 of 4 voxels are NaN or infinite" in caplog.text
    with pytest.raises(ValueError, match=r"x\.nii: no finite intensity"):
        RepairNonFinited("image")({"image": torch.full_like(image, float("nan"))})
