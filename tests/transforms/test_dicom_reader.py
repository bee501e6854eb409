"""PositionSortedPydicomReader: a DICOM series folder stacked by position along the slice normal, whatever its
InstanceNumbers (MONAI's PydicomReader stacks by InstanceNumber)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom")

from monai.data import PydicomReader
from monai.transforms import LoadImage

from gcl_monai.data.dicom import index_dicom, write_phantom_dicom
from gcl_monai.transforms import PositionSortedPydicomReader


@pytest.fixture
def series(tmp_path):
    """One volume of the phantom (single series: InstanceNumber counts from the apex) in a folder of its own, and its
    slices' pixels in position order, base first."""
    archive = write_phantom_dicom(tmp_path / "archive", num_patients=1, image_size=(24, 24), layout="single_series")
    volume = next(v for v in index_dicom(archive).volumes if v.phase == 0)
    folder = tmp_path / "series"
    folder.mkdir()
    for n, file in enumerate(reversed(volume.files)):  # file names in the opposite order too
        shutil.copy(file, folder / f"slice{n:02d}.dcm")
    return folder, np.stack([pydicom.dcmread(f).pixel_array.T for f in volume.files], axis=-1)


def _load(reader, folder):
    return LoadImage(reader=reader, image_only=True)(str(folder))


def test_the_stack_follows_the_position_against_the_instance_numbers(series):
    folder, expected = series
    by_position = _load(PositionSortedPydicomReader(), folder)
    np.testing.assert_array_equal(np.asarray(by_position), expected)
    by_number = _load(PydicomReader(), folder)  # what the subclass corrects: the apex first
    np.testing.assert_array_equal(np.asarray(by_number), expected[..., ::-1])
    # the affine starts at the base and steps along the slice normal: origin and third column (RAS) are the base's
    # position and the step to the next slice (LPS)
    last = expected.shape[-1] - 1  # the files were copied apex first: the base is the last file
    first, second = (pydicom.dcmread(folder / f"slice{n:02d}.dcm") for n in (last, last - 1))
    step = np.asarray(second.ImagePositionPatient, float) - np.asarray(first.ImagePositionPatient, float)
    column = np.asarray(by_position.affine)[:3, 2] * [-1, -1, 1]  # RAS -> LPS
    assert np.linalg.norm(step) == pytest.approx(10.0, abs=1e-3)
    np.testing.assert_allclose(column, step, atol=1e-3)
    np.testing.assert_allclose(
        np.asarray(by_position.affine)[:3, 3] * [-1, -1, 1], first.ImagePositionPatient, atol=1e-3
    )


def test_equal_instance_numbers_are_stacked_by_position(series):
    folder, expected = series
    for path in folder.iterdir():  # a per-slice-location export: every slice of a phase numbered 1
        ds = pydicom.dcmread(path)
        ds.InstanceNumber = 1
        ds.save_as(path)
    np.testing.assert_array_equal(np.asarray(_load(PositionSortedPydicomReader(), folder)), expected)
