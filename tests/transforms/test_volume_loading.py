"""LoadVolumed: the volumes of a datalist, NIfTI or HDF5, each read by the reader its suffix calls for, as float32."""

import os
import subprocess
import sys
from pathlib import Path

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


def test_without_nibabel_hdf5_volumes_load_and_the_speed_step_says_why_it_cannot_run(tmp_path, volume):
    """A GPU session's wheels carry no nibabel (experiments.gpu_session.offline_payload): its data (ACDC's HDF5)
    load without it, the phantom imports without it, and gpu-run's speed step, whose loader benchmark writes NIfTI,
    fails at once naming the wheel it lacks."""
    with h5py.File(tmp_path / "case.h5", "w") as f:
        f["image"] = volume
    script = f"""
import sys
sys.modules["nibabel"] = None  # any import of nibabel now raises ImportError
import numpy as np
from gcl_monai.transforms import LoadVolumed
import gcl_monai.data.phantom
from experiments.gpu_session import steps
from experiments.gpu_session.budget import get_budget
data = LoadVolumed("image")({{"image": {str(tmp_path / "case.h5")!r} + "#image"}})
assert np.asarray(data["image"]).shape == (4, 3, 2)
status, message = steps.run_speed({str(tmp_path)!r}, get_budget("rehearse"))
assert status == "failed" and "--with-nibabel" in message, (status, message)
print("ok")
"""
    root = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=root)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
