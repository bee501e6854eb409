"""DICOM in and out of inference: MONAI's PydicomReader stacking by slice position, the label map sampled at the
source pixels (hand-computed geometry), and DICOM SEG written with highdicom and read back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pydicom = pytest.importorskip("pydicom")
hd = pytest.importorskip("highdicom")

from monai.data import MetaTensor
from monai.transforms import LoadImage

from gcl_monai.data.dicom import index_dicom, write_phantom_dicom
from gcl_monai.data.dicom.inference import dicom_inference_cases
from gcl_monai.transforms import (
    PositionSortedPydicomReader,
    SaveDicomSegd,
    label_map_on_source,
    write_dicom_seg,
)


def _plane(position, orientation=(1, 0, 0, 0, 1, 0), spacing=(2.0, 0.5), rows=2, cols=4):
    ds = pydicom.Dataset()
    ds.ImagePositionPatient, ds.ImageOrientationPatient = list(position), list(orientation)
    ds.PixelSpacing, ds.Rows, ds.Columns, ds.SOPInstanceUID = list(spacing), rows, cols, "1.2.3"
    return ds


def test_label_map_on_source_by_hand():
    # voxel (i, j, k) at RAS (i, j, 10 k): an axial slice at z = 10 with 0.5 mm columns along L and 2 mm rows along P
    label = np.arange(8 * 8 * 2).reshape(8, 8, 2)
    affine = np.diag([1.0, 1.0, 10.0, 1.0])
    ds = _plane(position=(-1.0, -2.0, 10.0))  # LPS (-1, -2) = RAS (1, 2)
    out = label_map_on_source(label, affine, [ds])[0]
    # pixel (r, c): LPS x = -1 + 0.5 c, y = -2 + 2 r -> RAS (1 - 0.5 c, 2 - 2 r): voxel i = rint(1 - 0.5 c), j = 2 - 2 r
    expected = [[label[int(np.rint(1 - 0.5 * c)), 2 - 2 * r, 1] for c in range(4)] for r in range(2)]
    assert out.shape == (2, 4) and out.tolist() == expected
    with pytest.raises(ValueError, match="outside the label map"):
        label_map_on_source(label, affine, [_plane(position=(-1.0, -2.0, 10.0), rows=3)])  # row 2: j = -2


@pytest.mark.parametrize("layout", ["single_series", "per_slice"])
def test_reader_stacks_by_position_and_seg_round_trips(tmp_path, layout):
    archive = write_phantom_dicom(tmp_path / "dicom", num_patients=1, image_size=(32, 32), layout=layout)
    case = dicom_inference_cases(archive, tmp_path / "cases")[0]
    volume = index_dicom(archive).volumes[0]
    image = LoadImage(reader=PositionSortedPydicomReader(), image_only=True)(case["image"])
    # the stack follows the position along the normal, whatever the InstanceNumbers (reversed or all equal)
    expected = np.stack([pydicom.dcmread(f).pixel_array.T for f in volume.files], axis=-1)
    np.testing.assert_array_equal(np.asarray(image), expected)
    # a label map with every class, written as SEG and read back per source instance
    classes = sum((expected > np.percentile(expected, q)).astype(np.uint8) for q in (40, 70, 90))
    label = MetaTensor(torch.as_tensor(classes)[None], affine=image.affine, meta={"filename_or_obj": case["image"]})
    SaveDicomSegd("pred", tmp_path / "out", ["rv", "myocardium", "lv"])({"pred": label})
    seg = hd.seg.segread(tmp_path / "out" / f"{case['case']}_seg.dcm")
    seg_volume = seg.get_volume(combine_segments=True)  # frames placed by their plane positions (LPS)
    for k, header in enumerate(volume.headers):  # the SEG frame at each source slice's position
        ijk = np.linalg.solve(seg_volume.affine, [*header["ImagePositionPatient"], 1.0])
        frame = seg_volume.array[round(float(ijk[0]))]
        np.testing.assert_array_equal(frame, np.asarray(label[0, ..., k]).T)
        assert ijk[1:3] == pytest.approx([0, 0], abs=1e-3)  # the frame's first pixel sits at the slice's position
    if layout == "single_series":  # one source series: every frame also names its source instance
        uids = [h["SOPInstanceUID"] for h in volume.headers]
        frames = seg.get_pixels_by_source_instance(uids, combine_segments=True, skip_overlap_checks=True)
        np.testing.assert_array_equal(frames, np.moveaxis(np.asarray(label[0]), -1, 0).transpose(0, 2, 1))
    assert [s.SegmentLabel for s in seg.SegmentSequence] == ["rv", "myocardium", "lv"]
    referenced = {s.SeriesInstanceUID for s in seg.ReferencedSeriesSequence}
    assert referenced == set(volume.series) and seg.StudyInstanceUID == volume.headers[0]["StudyInstanceUID"]
    assert seg.PatientID == "patient001"


def test_seg_writer_leaves_nifti_cases_alone(tmp_path):
    label = MetaTensor(torch.zeros(1, 4, 4, 2), meta={"filename_or_obj": str(tmp_path / "case.nii.gz")})
    data = {"pred": label}
    assert SaveDicomSegd("pred", tmp_path / "out", ["a"])(data)["pred"] is label
    unnamed = MetaTensor(torch.zeros(1, 4, 4, 2))  # no file name: not mistaken for the working folder
    assert SaveDicomSegd("pred", tmp_path / "out", ["a"])({"pred": unnamed})["pred"] is unnamed
    assert not (tmp_path / "out").exists()


def test_write_dicom_seg_fills_absent_type2_attributes(tmp_path):
    archive = write_phantom_dicom(tmp_path / "dicom", num_patients=1, image_size=(32, 32))
    volume = index_dicom(archive).volumes[0]
    for f in volume.files:
        ds = pydicom.dcmread(f)
        del ds.PatientBirthDate, ds.AccessionNumber
        ds.save_as(f)
    case = dicom_inference_cases(archive, tmp_path / "cases")[0]
    image = LoadImage(reader=PositionSortedPydicomReader(), image_only=True)(case["image"])
    label = MetaTensor(torch.ones(1, *image.shape), affine=image.affine)
    seg = hd.seg.segread(write_dicom_seg(label, volume.files, tmp_path / "seg.dcm", ["heart"]))
    assert seg.PatientBirthDate == "" and seg.NumberOfFrames == len(volume.files)
