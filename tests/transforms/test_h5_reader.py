"""H5Reader: the axis order of NIfTI, dataset names and suffixes, several datasets as channels, errors, configs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser
from monai.data import NibabelReader
from monai.transforms import EnsureChannelFirstd, LoadImaged

from gcl_monai.data import split_h5_path
from gcl_monai.transforms import H5Reader
from tests.transforms.transform_helpers import write_h5, write_nifti


def xyz_volume(shape=(5, 4, 3)) -> np.ndarray:
    """A float32 (x, y, z) volume whose values encode their position: 100 z + 10 y + x."""
    x, y, z = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    return (100 * z + 10 * y + x).astype(np.float32)


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


def test_ensure_channel_first_on_h5(tmp_path):
    h5 = write_h5(tmp_path / "c.h5", np.zeros((3, 4, 5), np.float32))
    out = EnsureChannelFirstd(keys="image")(LoadImaged(keys="image", reader=H5Reader("image"))({"image": h5}))
    assert out["image"].shape == (1, 5, 4, 3)
