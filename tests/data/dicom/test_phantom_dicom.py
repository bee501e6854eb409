"""The phantom written as a DICOM archive (gcl_monai.data.dicom.phantom_dicom): the oblique orientation by hand, the
headers and UIDs of both layouts (the same for the same seed), the voxels, bad arguments and the command. The index of
what it writes is tested in test_index.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data.acdc import ACDC_GROUPS
from gcl_monai.data.dicom.phantom_dicom import MR_IMAGE_STORAGE, main, short_axis_orientation, write_phantom_dicom
from gcl_monai.data.phantom import SLICE_THICKNESS_MM, synthesize_patient
from tests.data.dicom.dicom_helpers import SIZE


def test_short_axis_orientation_by_hand():
    row, col = short_axis_orientation(0.0)
    assert row.tolist() == [1.0, 0.0, 0.0] and col.tolist() == [0.0, 1.0, 0.0]  # the axial plane
    # 30 degrees about left-right, then 15 about head-foot: row (cos 15, sin 15, 0), column
    # (-sin 15 cos 30, cos 15 cos 30, sin 30)
    row, col = short_axis_orientation(30.0)
    a, b = math.radians(30), math.radians(15)
    np.testing.assert_allclose(row, [math.cos(b), math.sin(b), 0.0], atol=1e-6)
    np.testing.assert_allclose(col, [-math.sin(b) * math.cos(a), math.cos(b) * math.cos(a), 0.5], atol=1e-6)
    assert abs(float(row @ col)) < 1e-5 and np.all(np.round(row, 6) == row)  # orthogonal, 6 decimals


def _headers(root):
    return [pydicom.dcmread(p) for p in sorted(root.rglob("IM*"))]


@pytest.mark.parametrize("layout", ["single_series", "per_slice"])
def test_the_archive_holds_the_phantoms_ed_and_es_slices(tmp_path, layout):
    root = write_phantom_dicom(tmp_path / "a", num_patients=2, seed=3, image_size=SIZE, layout=layout)
    datasets = _headers(root)
    for i, name in enumerate(("patient001", "patient002")):
        info, frames = synthesize_patient(np.random.default_rng([3, i]), ACDC_GROUPS[i * 5 // 2], SIZE)
        mine = [ds for ds in datasets if ds.PatientID == name]
        num_slices = frames[1][0].shape[2]
        assert len(mine) == 2 * num_slices and {ds.TemporalPositionIdentifier for ds in mine} == {1, info["ES"]}
        assert {ds.SOPClassUID for ds in mine} == {MR_IMAGE_STORAGE}
        assert len({ds.SeriesInstanceUID for ds in mine}) == (1 if layout == "single_series" else num_slices)
        assert mine[0].InstitutionName == ("Site A", "Site B")[i]
        base = min(float(ds.SliceLocation) for ds in mine)  # slice 0, the base: positions step by the thickness
        for ds in mine:  # each slice: the phantom's frame at its slice index, columns along the array's first axis
            frame, k = ds.TemporalPositionIdentifier, round((float(ds.SliceLocation) - base) / SLICE_THICKNESS_MM)
            np.testing.assert_array_equal(ds.pixel_array.T, frames[frame][0][..., k])
            rr = 800.0 + 20.0 * i
            assert float(ds.TriggerTime) == pytest.approx((frame - 1) * rr / info["NbFrame"], abs=1e-3)
    # the same seed writes the same UIDs
    again = _headers(write_phantom_dicom(tmp_path / "b", num_patients=2, seed=3, image_size=SIZE, layout=layout))
    assert [ds.SOPInstanceUID for ds in again] == [ds.SOPInstanceUID for ds in datasets]
    other = _headers(write_phantom_dicom(tmp_path / "c", num_patients=1, seed=4, image_size=SIZE, layout=layout))
    assert not {ds.StudyInstanceUID for ds in other} & {ds.StudyInstanceUID for ds in datasets}


def test_bad_arguments_and_the_command(tmp_path, capsys):
    with pytest.raises(ValueError, match="layout must be one of"):
        write_phantom_dicom(tmp_path, layout="enhanced")
    with pytest.raises(ValueError, match="num_patients must be >= 1"):
        write_phantom_dicom(tmp_path, num_patients=0)
    main(["--out", str(tmp_path / "cmd"), "--num-patients", "1", "--image-size", "16", "24", "--layout", "per_slice"])
    assert capsys.readouterr().out.strip() == str(tmp_path / "cmd")
    datasets = _headers(tmp_path / "cmd")
    assert datasets and {(ds.Columns, ds.Rows) for ds in datasets} == {(16, 24)}  # columns: the first axis
    assert {ds.InstanceNumber for ds in datasets} == {1, 2}  # per_slice: numbered by phase
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "x"), "--layout", "enhanced"])
