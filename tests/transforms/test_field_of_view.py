"""The square field of view (CenterSquareCrop) and field_of_view_crop: sizes, aspect ratio, the inverse."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.transforms import Invertd

from gcl_monai.transforms import (
    CenterSquareCrop,
    CenterSquareCropd,
    field_of_view_crop,
    volume_eval_transforms,
    volume_transforms,
)
from tests.transforms.transform_helpers import write_nifti


def test_square_field_of_view_keeps_the_aspect_ratio_and_inverts(tmp_path):
    # 40 x 20 in-plane, 3 slices: a 10 x 6 block in the centre (label 1), a marker in a corner (label 2)
    label_xyz = np.zeros((40, 20, 3), np.float32)
    label_xyz[16:26, 6:12] = 1
    label_xyz[0:2, 0:2] = 2
    item = {
        "image": write_nifti(tmp_path / "img.nii.gz", label_xyz * 100),
        "label": write_nifti(tmp_path / "img_gt.nii.gz", label_xyz),
    }
    pipeline = volume_eval_transforms(image_size=16, fov_scale=0.8, fov_shape="square", intensity=None)
    out = pipeline(item)
    # a square of side 0.8 x 20 = 16 around the centre (rows 12..27, columns 2..17), resized 16 -> 16: the block
    # keeps its 10 x 6 shape; the per-axis crop stretches it to 5 x 6 (32 x 16 -> 16 x 16)
    assert out["label"].shape == (1, 16, 16, 3)
    assert set(out["label"].unique().tolist()) == {0.0, 1.0}
    block = np.pad(np.ones((10, 6)), ((4, 2), (4, 6)))
    np.testing.assert_array_equal(np.asarray(out["label"][0, :, :, 0]) == 1, block)
    scaled = volume_eval_transforms(image_size=16, fov_scale=0.8, intensity=None)(item)
    assert int((scaled["label"][0, :, :, 0] == 1).sum()) == 5 * 6
    inverted = Invertd(keys="label", transform=pipeline, orig_keys="label", nearest_interp=True)(dict(out))
    assert inverted["label"].shape == (1, 40, 20, 3)
    np.testing.assert_array_equal(np.asarray(inverted["label"][0]) == 1, label_xyz == 1)
    slicer = volume_transforms(16, meta_keys=[], intensity=None, num_quantiles=3, fov_scale=0.8, fov_shape="square")
    slices = slicer(item)
    assert len(slices) == 3 and slices[0]["label"].shape == (1, 16, 16)
    with pytest.raises(ValueError, match="fov_shape must be one of"):
        volume_transforms(fov_shape="circle")


def test_center_square_crop_sizes():
    image = torch.arange(40 * 20 * 3, dtype=torch.float32).reshape(1, 40, 20, 3)
    assert CenterSquareCrop(0.8)(image).shape == (1, 16, 16, 3)
    assert CenterSquareCrop(0.55)(image).shape == (1, 11, 11, 3)  # ceil(0.55 x 20)
    assert CenterSquareCrop(1.0, plane_axes=(0, 2))(image).shape == (1, 3, 20, 3)
    np.testing.assert_array_equal(CenterSquareCrop(0.5)(image)[0, :, :, 0], image[0, 15:25, 5:15, 0])
    for bad in ({"roi_scale": 0.0}, {"roi_scale": 1.5}, {"roi_scale": 0.5, "plane_axes": (1, 1)}):
        with pytest.raises(ValueError):
            CenterSquareCrop(**bad)
    crop = field_of_view_crop(("image", "label"), 0.8, "square")
    assert isinstance(crop, CenterSquareCropd) and crop.cropper.plane_axes == (0, 1)
    assert type(field_of_view_crop("image", 1.0)).__name__ == "Identityd"
    assert type(field_of_view_crop("image", 0.8, slice_axis=0)).__name__ == "CenterScaleCropd"
    assert field_of_view_crop("image", 0.8, "square", slice_axis=0).cropper.plane_axes == (1, 2)
