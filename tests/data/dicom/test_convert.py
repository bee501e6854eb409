"""The one-time conversion of indexed DICOM volumes to NIfTI: once per volume, the voxels in the index's order, an
unreadable series named."""

from __future__ import annotations

import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data.dicom import read_dicom


def test_volumes_are_converted_once(archive, tmp_path):
    first = read_dicom(archive, ["patient_id"], tmp_path)
    stamps = {d["image"]: os.stat(d["image"]).st_mtime_ns for d in first}
    again = read_dicom(archive, ["patient_id"], tmp_path)
    assert {d["image"]: os.stat(d["image"]).st_mtime_ns for d in again} == stamps


def test_a_volume_keeps_its_voxels_and_an_unreadable_series_is_named(tmp_path):
    from gcl_monai.data import DatalistError
    from gcl_monai.data.dicom import convert_volume, index_dicom, write_phantom_dicom
    from tests.data.dicom.dicom_helpers import SIZE

    root = write_phantom_dicom(tmp_path / "a", num_patients=1, image_size=SIZE, layout="single_series")
    volume = index_dicom(root).volumes[0]
    path = convert_volume(volume, tmp_path / "cache")
    assert path == str(tmp_path / "cache" / f"{volume.volume_id}.nii.gz")
    # the first axis along the rows' direction (the columns), the third along the slice normal: the index's order
    expected = np.stack([pydicom.dcmread(f).pixel_array.T for f in volume.files], axis=-1)
    image = nib.load(path)
    np.testing.assert_array_equal(np.asarray(image.dataobj), expected)
    assert image.header.get_zooms()[2] == pytest.approx(abs(volume.positions[1] - volume.positions[0]), rel=1e-4)
    broken = Path(volume.files[2])
    broken.write_bytes(broken.read_bytes()[: broken.stat().st_size // 2])  # the pixel data cut short
    (tmp_path / "cache" / Path(path).name).unlink()
    with pytest.raises(DatalistError, match=f"series {volume.series[0]}: pixel data unreadable"):
        convert_volume(volume, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-written left behind
