"""LoadVolumed: the volumes of a datalist, NIfTI or HDF5, each read by the reader its suffix calls for, as float32."""

import h5py
import nibabel as nib
import numpy as np
import pytest
import torch

from gcl_monai.transforms import LoadVolumed


@pytest.fixture
def volume():
    return np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 3, 4)


def test_nifti_and_hdf5_load_as_float32_arrays(tmp_path, volume):
    nib.save(nib.Nifti1Image(volume, np.eye(4)), tmp_path / "image.nii.gz")
    with h5py.File(tmp_path / "case.h5", "w") as f:
        f["label"] = volume[::-1].copy()
    data = LoadVolumed(["image", "label"])(
        {"image": str(tmp_path / "image.nii.gz"), "label": f"{tmp_path}/case.h5#label"}
    )
    assert data["image"].dtype == data["label"].dtype == torch.float32
    np.testing.assert_array_equal(np.asarray(data["image"]), volume)
    # H5Reader reverses the axes of an HDF5 dataset, stored (z, y, x), into NIfTI's (x, y, z)
    np.testing.assert_array_equal(np.asarray(data["label"]), volume[::-1].T)
    assert "image_meta_dict" not in data  # image only: the meta data ride on the MetaTensor


def test_an_hdf5_file_without_a_dataset_is_refused_by_name(tmp_path, volume):
    with h5py.File(tmp_path / "case.h5", "w") as f:
        f["image"] = volume
    with pytest.raises(Exception, match="no dataset named"):
        LoadVolumed("image")({"image": str(tmp_path / "case.h5")})
