"""The preset pipelines: volumes to fixed-size slices from HDF5 and NIfTI, channels, label maps, intensity, the field
of view inverted back, fine-tuning and evaluation, bundle configs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser
from monai.data import MetaTensor
from monai.transforms import Invertd, LoadImaged

from gcl_monai.transforms import (
    SelectChanneld,
    VolumeToSlicesd,
    dice_grid_steps,
    eval_transforms,
    finetune_transforms,
    slice_quantiles,
    volume_eval_transforms,
    volume_transforms,
)
from tests.transforms.transform_helpers import volume_item, write_h5, write_nifti


def labelled_volume(shape_xyz, seed=0) -> tuple[np.ndarray, np.ndarray]:
    """A random image and a label with classes 0..3 as blocks large enough to survive down-sampling."""
    rng = np.random.default_rng(seed)
    image = rng.random(shape_xyz, dtype=np.float32)
    label = np.zeros(shape_xyz, dtype=np.uint8)
    nx, ny = shape_xyz[0], shape_xyz[1]
    label[nx // 4 : nx // 2, ny // 4 : ny // 2] = 1
    label[nx // 2 : 3 * nx // 4, ny // 4 : ny // 2] = 2
    label[nx // 4 : 3 * nx // 4, ny // 2 : 3 * ny // 4] = 3
    return image, label


def test_volume_transforms_h5_and_nifti_end_at_fixed_size(tmp_path):
    image, label = labelled_volume((30, 40, 6))  # h5: stored (Z, H, W) = (6, 40, 30)
    h5 = write_h5(tmp_path / "patient001_frame01.h5", image.transpose(), label.transpose())
    image2, label2 = labelled_volume((50, 36, 5), seed=1)
    nii_image = write_nifti(tmp_path / "case.nii.gz", image2 * 900)
    nii_label = write_nifti(tmp_path / "case_gt.nii.gz", label2)
    pipeline = volume_transforms(image_size=(32, 32))
    items = [
        {"image": f"{h5}#image", "label": f"{h5}#label", "patient_id": 0, "organ_state": 1},
        {"image": nii_image, "label": nii_label, "patient_id": 1, "organ_state": 0},
    ]
    for item, num_slices in zip(items, (6, 5)):
        out = pipeline(item)
        assert isinstance(out, list) and len(out) == num_slices
        for s in out:
            assert s["image"].shape == s["label"].shape == (1, 32, 32)
            assert 0.0 <= float(s["image"].min()) and float(s["image"].max()) <= 1.0
        labels = set(torch.cat([s["label"].flatten() for s in out]).unique().tolist())
        assert labels == {0.0, 1.0, 2.0, 3.0}
        assert [int(s["slice_quantile"]) for s in out] == slice_quantiles(num_slices)
        assert int(out[0]["patient_id"]) == item["patient_id"]
    assert volume_transforms(image_size=24, with_label=False)(items[0])[0]["image"].shape == (1, 24, 24)


def test_volume_transforms_channel_label_map_and_zscore(tmp_path):
    four_d = np.stack([np.zeros((20, 20, 4)), np.ones((20, 20, 4)) * np.arange(4)], axis=-1).astype(np.float32)
    image = write_nifti(tmp_path / "msd.nii.gz", four_d)
    label_xyz = np.zeros((20, 20, 4), np.float32)
    label_xyz[5:10, 5:15] = 205
    label_xyz[10:15, 5:15] = 850
    label = write_nifti(tmp_path / "msd_gt.nii.gz", label_xyz)
    item = {"image": image, "label": label, "patient_id": 4, "channel": 1}
    out = volume_transforms(image_size=16, meta_keys="patient_id", label_map={"205": 1, "850": 7}, intensity=None)(item)
    assert out[0]["image"].shape == (1, 16, 16)
    assert [float(s["image"].max()) for s in out] == [0.0, 1.0, 2.0, 3.0]  # channel 1 kept
    assert set(torch.cat([s["label"].flatten() for s in out]).unique().tolist()) == {0.0, 1.0, 7.0}
    zscored = volume_transforms(image_size=16, meta_keys="patient_id", intensity="zscore")(item)
    stacked = torch.stack([s["image"] for s in zscored])
    assert abs(float(stacked.mean())) < 0.2
    with pytest.raises(ValueError, match="intensity"):
        volume_transforms(intensity="minmax")
    with pytest.raises(RuntimeError, match="transform"):  # Compose wraps the IndexError
        volume_transforms(image_size=16, meta_keys="patient_id")({**item, "channel": 2})
    with pytest.raises(IndexError, match=r"channel 2 out of range: .*msd\.nii\.gz has 2 channels"):
        SelectChanneld()({"image": LoadImaged(keys="image", ensure_channel_first=True)(item)["image"], "channel": 2})


def test_fov_scale_keeps_the_centre_and_inverts_to_the_input_grid(tmp_path):
    # 40 x 20 in-plane, 3 slices: a 10 x 6 block in the centre (label 1), a marker in a corner (label 2)
    label_xyz = np.zeros((40, 20, 3), np.float32)
    label_xyz[16:26, 6:12] = 1
    label_xyz[0:2, 0:2] = 2
    image = write_nifti(tmp_path / "img.nii.gz", label_xyz * 100)
    label = write_nifti(tmp_path / "img_gt.nii.gz", label_xyz)
    item = {"image": image, "label": label}
    pipeline = volume_eval_transforms(image_size=(16, 8), fov_scale=0.8, intensity=None)
    out = pipeline(item)
    assert out["label"].shape == (1, 16, 8, 3)
    # the central 32 x 16 is kept (the corner marker is cut) and resized by 0.5: the block becomes 5 x 3 pixels
    assert set(out["label"].unique().tolist()) == {0.0, 1.0}
    assert int((out["label"] == 1).sum()) == 5 * 3 * 3
    inverted = Invertd(keys="label", transform=pipeline, orig_keys="label", nearest_interp=True)(dict(out))
    assert inverted["label"].shape == (1, 40, 20, 3)
    np.testing.assert_array_equal(np.asarray(inverted["label"][0]) == 1, label_xyz == 1)  # the block comes back
    assert float(inverted["label"][0, :4, :2].sum()) == 0  # the cut corner is background
    full = volume_eval_transforms(image_size=(16, 8), intensity=None)(item)
    assert int((full["label"] == 1).sum()) < int((out["label"] == 1).sum())
    with pytest.raises(ValueError, match="fov_scale"):
        volume_transforms(fov_scale=0.0)


def test_finetune_and_eval_transforms():
    item = VolumeToSlicesd()(volume_item(shape=(1, 32, 32, 4)))[0]
    tuned = finetune_transforms(image_size=32, affine_prob=1.0, seed=0)(item)
    assert tuned["image"].shape == tuned["label"].shape == (1, 32, 32)
    assert set(tuned["label"].unique().tolist()) <= {0.0, 1.0, 2.0, 3.0}  # nearest: no new label values
    evaluated = [eval_transforms()(item) for _ in range(2)]
    assert torch.equal(evaluated[0]["image"], evaluated[1]["image"]) and isinstance(evaluated[0]["image"], MetaTensor)
    assert torch.equal(evaluated[0]["image"].as_tensor(), item["image"].as_tensor())


def test_presets_from_bundle_config(tmp_path):
    image, label = labelled_volume((30, 40, 4))
    h5 = write_h5(tmp_path / "p.h5", image.transpose(), label.transpose())
    config = {
        "volume": {"_target_": "gcl_monai.transforms.volume_transforms", "image_size": [16, 16]},
        "views": {"_target_": "gcl_monai.transforms.pretrain_transforms", "image_size": [16, 16], "seed": 0},
    }
    parser = ConfigParser(config)
    slices = parser.get_parsed_content("volume")(
        {"image": f"{h5}#image", "label": f"{h5}#label", "patient_id": 0, "organ_state": 0}
    )
    views = parser.get_parsed_content("views")(slices[0])
    assert views["image"].shape == views["image_2"].shape == (1, 16, 16)


def test_dice_grid_steps_are_the_named_grids():
    steps = {"network": ["a", "b"], "input": ("c",)}
    assert dice_grid_steps("input", **steps) == ["c"] and dice_grid_steps("network", **steps) == ["a", "b"]
    for grid, given in (("label", steps), ("input", {"network": ["a"]})):  # an unknown grid; a grid without steps
        with pytest.raises(ValueError, match=r"dice_grid must be one of \('network', 'input'\)"):
            dice_grid_steps(grid, **given)
