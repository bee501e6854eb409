"""Tests of gcl_monai.transforms: H5Reader, VolumeToSlicesd, ContrastiveViewsd and the preset pipelines."""

from __future__ import annotations

import h5py
import nibabel as nib
import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser
from monai.data import DataLoader, Dataset, MetaTensor, NibabelReader, list_data_collate
from monai.transforms import EnsureChannelFirstd, Invertd, LoadImaged
from monai.utils import set_determinism

from gcl_monai.data import split_h5_path
from gcl_monai.transforms import (
    CenterSquareCrop,
    CenterSquareCropd,
    ContrastiveViewsd,
    H5Reader,
    RandRelativeGaussianNoised,
    SelectChanneld,
    VolumeToSlicesd,
    eval_transforms,
    field_of_view_crop,
    finetune_transforms,
    pretrain_transforms,
    slice_quantiles,
    volume_eval_transforms,
    volume_transforms,
)


def write_h5(path, image_zhw: np.ndarray, label_zhw: np.ndarray | None = None) -> str:
    """Write arrays stored (Z, H, W) like the SSL4MIS files; return the path."""
    with h5py.File(path, "w") as f:
        f.create_dataset("image", data=image_zhw)
        if label_zhw is not None:
            f.create_dataset("label", data=label_zhw)
    return str(path)


def write_nifti(path, array_xyz: np.ndarray) -> str:
    nib.save(nib.Nifti1Image(array_xyz, np.eye(4)), str(path))
    return str(path)


def xyz_volume(shape=(5, 4, 3)) -> np.ndarray:
    """A float32 (x, y, z) volume whose values encode their position: 100 z + 10 y + x."""
    x, y, z = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    return (100 * z + 10 * y + x).astype(np.float32)


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


def volume_item(shape=(1, 8, 6, 5), patient_id=3, organ_state=1, filename="vol.nii.gz") -> dict:
    image = MetaTensor(torch.rand(shape), meta={"filename_or_obj": filename})
    label = MetaTensor(torch.randint(0, 4, shape).float(), meta={"filename_or_obj": filename})
    return {"image": image, "label": label, "patient_id": patient_id, "organ_state": organ_state, "patient": "p3"}


# ---------------------------------------------------------------- H5Reader


def test_h5_reader_axis_order_matches_nifti(tmp_path):
    xyz = xyz_volume()
    h5 = write_h5(tmp_path / "case.h5", xyz.transpose(), (xyz.transpose() > 150).astype(np.uint8))
    nii = write_nifti(tmp_path / "case.nii.gz", xyz)
    loader = LoadImaged(keys=["image", "label"], reader=H5Reader(), ensure_channel_first=True)
    out = loader({"image": f"{h5}#image", "label": f"{h5}#label"})
    from_nifti = LoadImaged(keys="image", ensure_channel_first=True)({"image": nii})["image"]
    assert out["image"].shape == (1, 5, 4, 3) == from_nifti.shape
    assert torch.equal(out["image"], from_nifti)
    for z in range(3):  # the stored first axis (Z) is the last axis after loading
        assert set(torch.div(out["image"][..., z], 100, rounding_mode="floor").unique().tolist()) == {z}
    assert torch.equal(out["label"], (from_nifti > 150).float())
    assert out["image"].meta["filename_or_obj"] == f"{h5}#image"
    assert torch.equal(out["image"].affine, torch.eye(4, dtype=torch.float64))


def test_h5_reader_default_dataset_suffixes_and_reader_list(tmp_path):
    xyz = xyz_volume()
    h5 = write_h5(tmp_path / "case.h5", xyz.transpose())
    nii = write_nifti(tmp_path / "case.nii.gz", xyz)
    reader = H5Reader(default_dataset="image")
    assert reader.verify_suffix(h5) and reader.verify_suffix(f"{h5}#label") and reader.verify_suffix("a.HDF5")
    assert not reader.verify_suffix(nii) and not reader.verify_suffix([h5, nii])
    data, meta = reader.get_data(reader.read(h5))
    assert data.shape == (5, 4, 3) and np.isnan(meta["original_channel_dim"])
    assert split_h5_path(f"{h5}::image") == split_h5_path(f"{h5}#image") == (h5, "image")  # "::": bundle configs
    assert np.array_equal(reader.get_data(reader.read(f"{h5}::image"))[0], data)
    loader = LoadImaged(keys="image", reader=[NibabelReader(), H5Reader()], ensure_channel_first=True)
    assert torch.equal(loader({"image": f"{h5}#image"})["image"], loader({"image": nii})["image"])


def test_h5_reader_stacks_several_datasets_as_channels(tmp_path):
    xyz = xyz_volume()
    h5 = write_h5(tmp_path / "case.h5", xyz.transpose(), xyz.transpose().astype(np.uint8))
    out = LoadImaged(keys="image", reader=H5Reader(dtype="float32"))({"image": [f"{h5}#image", f"{h5}#label"]})
    assert out["image"].shape == (2, 5, 4, 3)


def test_h5_reader_errors(tmp_path):
    h5 = write_h5(tmp_path / "case.h5", np.zeros((3, 4, 5), np.float32), np.zeros((3, 4, 5), np.uint8))
    reader = H5Reader()
    with pytest.raises(FileNotFoundError, match="missing.h5"):
        reader.read(str(tmp_path / "missing.h5#image"))
    with pytest.raises(KeyError, match=r"no dataset 'img'.*\['image', 'label'\]"):
        reader.read(f"{h5}#img")
    with pytest.raises(ValueError, match="no dataset named"):
        reader.read(h5)
    with pytest.raises(ValueError, match="not an HDF5 file"):
        reader.read(str(tmp_path / "case.nii.gz"))
    with pytest.raises(RuntimeError, match=r"no dataset 'img'"):  # LoadImage reports the reader's message
        LoadImaged(keys="image", reader=H5Reader())({"image": f"{h5}#img"})


def test_h5_reader_from_bundle_config():
    parser = ConfigParser({"reader": {"_target_": "gcl_monai.transforms.H5Reader", "default_dataset": "image"}})
    reader = parser.get_parsed_content("reader")
    assert isinstance(reader, H5Reader) and reader.default_dataset == "image"


# ---------------------------------------------------------------- VolumeToSlicesd


@pytest.mark.parametrize(
    "num_slices, expected",
    [
        (4, [1, 2, 3, 4]),
        (6, [1, 1, 2, 3, 3, 4]),
        (9, [1, 1, 1, 2, 2, 3, 3, 4, 4]),
        (10, [1, 1, 1, 2, 2, 3, 3, 3, 4, 4]),
    ],
)
def test_slice_quantiles(num_slices, expected):
    assert slice_quantiles(num_slices, 4) == expected
    out = VolumeToSlicesd()(volume_item(shape=(1, 8, 6, num_slices)))
    assert [int(o["slice_quantile"]) for o in out] == expected
    assert [int(o["slice_index"]) for o in out] == list(range(num_slices))


def test_volume_to_slices_content_meta_and_types():
    item = volume_item(shape=(2, 8, 6, 5))
    item["image"].affine = torch.diag(torch.tensor([2.0, 3.0, 10.0, 1.0], dtype=torch.float64))
    out = VolumeToSlicesd()(item)
    assert len(out) == 5
    for s, slice_item in enumerate(out):
        assert isinstance(slice_item["image"], MetaTensor) and slice_item["image"].shape == (2, 8, 6)
        assert torch.equal(slice_item["image"].as_tensor(), item["image"][..., s].as_tensor())
        assert torch.equal(slice_item["label"].as_tensor(), item["label"][..., s].as_tensor())
        assert slice_item["image"].meta["filename_or_obj"] == "vol.nii.gz"
        assert slice_item["image"].affine.shape == (3, 3) and slice_item["image"].affine[0, 0] == 2.0
        for key in ("patient_id", "organ_state", "slice_quantile", "slice_index"):
            assert slice_item[key].dtype == torch.int64 and slice_item[key].ndim == 0
        assert int(slice_item["patient_id"]) == 3 and int(slice_item["organ_state"]) == 1
        assert slice_item["patient"] == "p3"
    along_first = VolumeToSlicesd(slice_axis=0)(volume_item(shape=(1, 4, 6, 5)))
    assert len(along_first) == 4 and along_first[0]["image"].shape == (1, 6, 5)


def test_volume_to_slices_meta_keys_survive_collation():
    out = VolumeToSlicesd()(volume_item(shape=(1, 8, 6, 6), patient_id=7, organ_state=0))
    batch = list_data_collate(out)
    assert batch["image"].shape == (6, 1, 8, 6)
    for key in ("patient_id", "organ_state", "slice_quantile", "slice_index"):
        assert batch[key].dtype == torch.int64 and batch[key].shape == (6,)
    assert batch["slice_quantile"].tolist() == [1, 1, 2, 3, 3, 4]
    volumes = [volume_item(shape=(1, 8, 6, 4), patient_id=1), volume_item(shape=(1, 8, 6, 4), patient_id=2)]
    loader = DataLoader(Dataset(volumes, transform=VolumeToSlicesd()), batch_size=2)  # lists are flattened
    batch = next(iter(loader))
    assert batch["patient_id"].tolist() == [1] * 4 + [2] * 4 and batch["patient_id"].dtype == torch.int64
    assert batch["image"].shape == (8, 1, 8, 6)


def test_volume_to_slices_bad_inputs():
    with pytest.raises(ValueError, match=r"short\.nii\.gz has 3 slices"):
        VolumeToSlicesd()(volume_item(shape=(1, 8, 6, 3), filename="short.nii.gz"))
    item = volume_item(filename="odd.nii.gz")
    item["label"] = MetaTensor(torch.zeros(1, 8, 7, 5))
    with pytest.raises(ValueError, match=r"spatial shapes differ in odd\.nii\.gz"):
        VolumeToSlicesd()(item)
    with pytest.raises(KeyError, match=r"'cycle_phase'.*available keys.*patient_id"):
        VolumeToSlicesd(meta_keys=("patient_id", "cycle_phase"))(volume_item())
    out = VolumeToSlicesd(meta_keys=("patient_id", "cycle_phase"), allow_missing_keys=True)(volume_item())
    assert "cycle_phase" not in out[0] and int(out[0]["patient_id"]) == 3
    with pytest.raises(TypeError, match="organ_state"):
        VolumeToSlicesd()({**volume_item(), "organ_state": 0.5})
    with pytest.raises(ValueError, match="channel-first 3D volume"):
        VolumeToSlicesd()({**volume_item(), "image": torch.zeros(8, 6, 5), "label": torch.zeros(8, 6, 5)})


# ---------------------------------------------------------------- contrastive views


def slice_image(seed=0) -> MetaTensor:
    generator = torch.Generator().manual_seed(seed)
    return MetaTensor(torch.rand(1, 40, 48, generator=generator) * 0.2)


def test_contrastive_views_shapes_and_difference():
    views = ContrastiveViewsd(spatial_size=(32, 32), seed=0)
    source = slice_image()
    out = views({"image": source, "label": torch.zeros(1, 40, 48)})
    assert out["image"].shape == out["image_2"].shape == (1, 32, 32)
    assert not torch.allclose(out["image"], out["image_2"])
    assert out["label"].shape == (1, 40, 48)  # other keys untouched
    three = ContrastiveViewsd(view_keys=("v1", "v2", "v3"), spatial_size=16, seed=0)({"image": source})
    assert {"image", "v1", "v2", "v3"} <= set(three) and three["v3"].shape == (1, 16, 16)
    with pytest.raises(ValueError, match="two view keys"):
        ContrastiveViewsd(view_keys=("image",))


def test_contrastive_views_reproducible():
    source = slice_image()
    views = ContrastiveViewsd(spatial_size=(32, 32))
    first = [views({"image": source}) for _ in range(3)]
    views.set_random_state(seed=11)
    a = [views({"image": source}) for _ in range(3)]
    views.set_random_state(seed=11)
    b = [views({"image": source}) for _ in range(3)]
    for x, y in zip(a, b):
        assert torch.equal(x["image"], y["image"]) and torch.equal(x["image_2"], y["image_2"])
    assert not all(torch.equal(x["image"], y["image"]) for x, y in zip(first, a))
    try:
        set_determinism(seed=5)
        c = pretrain_transforms(image_size=32)({"image": source})
        set_determinism(seed=5)
        d = pretrain_transforms(image_size=32)({"image": source})
    finally:
        set_determinism(seed=None)
    assert torch.equal(c["image"], d["image"]) and torch.equal(c["image_2"], d["image_2"])
    assert type(c["image"]) is torch.Tensor  # track_meta=False: plain tensors


def test_relative_noise_scales_with_image_std():
    image = slice_image()
    noise = RandRelativeGaussianNoised(keys="image", prob=1.0, std_fraction=0.2)
    noise.set_random_state(seed=3)
    small = noise({"image": image})["image"] - image
    noise.set_random_state(seed=3)
    large = noise({"image": image * 10})["image"] - image * 10
    assert small.abs().max() > 0
    assert torch.allclose(large, small * 10, rtol=1e-3, atol=1e-5)


# ---------------------------------------------------------------- presets


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


def test_ensure_channel_first_on_h5(tmp_path):
    h5 = write_h5(tmp_path / "c.h5", np.zeros((3, 4, 5), np.float32))
    out = EnsureChannelFirstd(keys="image")(LoadImaged(keys="image", reader=H5Reader("image"))({"image": h5}))
    assert out["image"].shape == (1, 5, 4, 3)
