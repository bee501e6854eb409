"""The index of a DICOM folder tree: both cine layouts of the phantom archive, nesting, odd file names, a stray
non-DICOM file, a missing slice and a second orientation; pydicom's own test archive (a 5-slice CT stack ordered
against its InstanceNumbers, a CT series with a gap, single oblique MR slices, radiographs, DICOMDIR files)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data.dicom import index_dicom, slice_normal, write_phantom_dicom
from gcl_monai.data.phantom import synthesize_patient
from tests.data.dicom.dicom_helpers import SIZE


def _phantom(seed: int, i: int, num_patients: int):
    from gcl_monai.data.acdc import ACDC_GROUPS

    group = ACDC_GROUPS[i * len(ACDC_GROUPS) // num_patients]
    return synthesize_patient(np.random.default_rng([seed, i]), group, SIZE)


@pytest.mark.parametrize("layout", ["single_series", "per_slice"])
def test_both_cine_layouts_give_one_volume_per_patient_and_phase_in_position_order(tmp_path, layout):
    write_phantom_dicom(tmp_path, num_patients=2, image_size=SIZE, layout=layout)
    index = index_dicom(tmp_path)
    assert index.skipped == [] and index.non_dicom == []
    assert sorted((v.patient, v.phase) for v in index.volumes) == [
        ("patient001", 0),
        ("patient001", 1),
        ("patient002", 0),
        ("patient002", 1),
    ]
    for volume in index.volumes:
        info, frames = _phantom(0, int(volume.patient[-3:]) - 1, 2)
        assert len(volume.files) == frames[1][0].shape[2]
        assert np.all(np.diff(volume.positions) == pytest.approx(10.0, abs=1e-3))  # base to apex, 10 mm apart
        instance = [h["InstanceNumber"] for h in volume.headers]
        if layout == "single_series":
            assert instance == sorted(instance, reverse=True)  # ordered by position, against InstanceNumber
            assert len(volume.series) == 1
        else:
            assert len(volume.series) == len(volume.files)  # stacked across the series of its slice locations
        es_time = (info["ES"] - 1) * volume.headers[0]["NominalInterval"] / info["NbFrame"]
        assert volume.trigger_time == pytest.approx(0.0 if volume.phase == 0 else es_time, abs=1e-3)


def _edit(path: Path, out: Path, **changes) -> None:
    ds = pydicom.dcmread(path)
    for keyword, value in changes.items():
        setattr(ds, keyword, value)
    out.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(out)


def test_messy_archive_is_indexed_and_every_problem_named(tmp_path):
    root = tmp_path / "archive"
    write_phantom_dicom(root, num_patients=3, image_size=SIZE, layout="single_series")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    # odd names and deeper nesting
    shutil.move(files[0], files[0].with_name("weird name (1).DCM"))
    (root / "deeper" / "still deeper").mkdir(parents=True)
    shutil.move(files[1], root / "deeper" / "still deeper" / "x")
    (root / "notes.txt").write_text("exported by hand, not DICOM")
    (root / "pt002" / "thumbs.db").write_bytes(b"\x00" * 300)
    # patient 2: one slice of the ES phase lost
    pt2 = sorted(p for p in (root / "pt002").rglob("IM*"))
    es = [p for p in pt2 if float(pydicom.dcmread(p, stop_before_pixels=True).TriggerTime) > 0]
    lost = sorted(es, key=lambda p: float(pydicom.dcmread(p, stop_before_pixels=True).SliceLocation))[3]
    lost.unlink()
    # patient 3: its ED stack again in a second orientation (a new series), and one lone slice of a third one
    pt3 = sorted(p for p in (root / "pt003").rglob("IM01*"))
    long_axis = ["0", "1", "0", "0", "0", "-1"]
    series = pydicom.uid.generate_uid()
    for n, path in enumerate(pt3):
        position = [str(-20.0 + 8.0 * n), "0", "0"]
        _edit(
            path,
            root / "pt003" / "la" / f"{n}.dcm",
            ImageOrientationPatient=long_axis,
            SeriesInstanceUID=series,
            SOPInstanceUID=pydicom.uid.generate_uid(),
            ImagePositionPatient=position,
        )
    _edit(
        pt3[0],
        root / "pt003" / "loc.dcm",
        ImageOrientationPatient=["1", "0", "0", "0", "1", "0"],
        SOPInstanceUID=pydicom.uid.generate_uid(),
    )

    index = index_dicom(root)
    assert sorted(index.non_dicom) == [str(root / "notes.txt"), str(root / "pt002" / "thumbs.db")]
    kept = [
        (v.patient, v.phase, len(v.files), tuple(np.round(v.headers[0]["ImageOrientationPatient"], 3)))
        for v in index.volumes
    ]
    num_slices = [_phantom(0, i, 3)[1][1][0].shape[2] for i in range(3)]
    sa = tuple(np.round(pydicom.dcmread(pt3[0]).ImageOrientationPatient, 3))
    assert sorted(kept) == sorted(
        [
            ("patient001", 0, num_slices[0], sa),
            ("patient001", 1, num_slices[0], sa),
            ("patient002", 0, num_slices[1], sa),  # its ES volume lost a slice
            ("patient003", 0, num_slices[2], sa),
            ("patient003", 1, num_slices[2], sa),
            ("patient003", 0, num_slices[2], (0.0, 1.0, 0.0, 0.0, 0.0, -1.0)),  # second orientation: its own stack
        ]
    )
    by_file = {f: s for s in index.skipped for f in s.files}
    missing = by_file[str(es[0] if es[0] != lost else es[1])]
    assert "slice missing at" in missing.reason
    assert f"{num_slices[1] - 1} of {num_slices[1]} positions" in missing.reason
    assert missing.series == [pydicom.dcmread(es[0], stop_before_pixels=True).SeriesInstanceUID]
    assert by_file[str(root / "pt003" / "loc.dcm")].reason == "a single slice position: not a 3D volume"
    # the files renamed or moved are still in their volumes
    used = {f for v in index.volumes for f in v.files}
    assert {str(files[0].with_name("weird name (1).DCM")), str(root / "deeper" / "still deeper" / "x")} <= used


def test_a_trigger_less_stack_with_two_slices_at_one_position_is_refused(tmp_path):
    write_phantom_dicom(tmp_path, num_patients=1, image_size=SIZE)
    for path in tmp_path.rglob("IM*"):
        ds = pydicom.dcmread(path)
        del ds.TriggerTime
        ds.save_as(path)
    index = index_dicom(tmp_path)
    assert index.volumes == [] and len(index.skipped) == 1
    assert index.skipped[0].reason.startswith("duplicate slice positions without TriggerTime")


# ------------------------------------------------------------------------------------------------------------------
# pydicom's own test archive (installed with pydicom, no download)
# ------------------------------------------------------------------------------------------------------------------
def _pydicom_archive() -> Path:
    from pydicom.data import get_testdata_file

    small = get_testdata_file("CT_small.dcm")
    root = Path(small).parent / "dicomdirtests" if small else None
    if root is None or not (root / "98892001" / "CT5N").is_dir():
        pytest.skip("pydicom's dicomdirtests archive is not installed with this pydicom")
    return root


def test_pydicom_ct5n_stack_is_ordered_by_position_against_instance_number():
    root = _pydicom_archive()
    index = index_dicom(root / "98892001")
    (ct5n,) = [v for v in index.volumes if "CT5N" in v.files[0]]
    assert [Path(f).name for f in ct5n.files] == ["3353", "3023", "2693", "2392", "2062"]
    assert [h["InstanceNumber"] for h in ct5n.headers] == [10, 9, 8, 7, 6]
    assert np.diff(ct5n.positions) == pytest.approx([2.5] * 4)
    np.testing.assert_allclose(slice_normal(ct5n.headers[0]["ImageOrientationPatient"]), [0, 0, 1])
    assert ct5n.trigger_time is None and ct5n.phase is None
    # CT2N: two single slices of different orientations
    assert {Path(f).name for s in index.skipped for f in s.files} == {"6293", "6924"}


def test_pydicom_archive_skips_gaps_single_oblique_slices_radiographs_and_dicomdir():
    root = _pydicom_archive()
    index = index_dicom(root)
    assert [Path(v.files[0]).parent.name for v in index.volumes] == ["CT5N"]
    reasons = {Path(f).relative_to(root).as_posix(): s.reason for s in index.skipped for f in s.files}
    assert reasons["77654033/CT2/17106"].startswith("missing slice(s): gap of 202.50 mm")
    for name in ("4467", "4528", "4558", "4588", "4618", "4648", "4678"):  # MR700: seven oblique single slices
        assert reasons[f"98892003/MR700/{name}"] == "a single slice position: not a 3D volume"
    assert reasons["98892003/MR2/5011"].startswith("mixed PixelSpacing")  # MR1 and MR2 pooled at one orientation
    assert reasons["77654033/CR1/6154"].startswith("not a cross-sectional image: ImagePositionPatient")
    assert reasons["DICOMDIR"].startswith("not a cross-sectional image")
    (mr700,) = {tuple(s.series) for s in index.skipped if any("MR700" in f for f in s.files)}
    assert len(mr700) == 1  # reported once for its series, with its seven files


def test_phases_by_rank_when_the_heart_rate_differs_between_slice_locations_and_copies_are_left_out(tmp_path):
    write_phantom_dicom(tmp_path, num_patients=1, image_size=SIZE, layout="per_slice")
    files = sorted(tmp_path.rglob("IM*"))
    # each slice location in its own breath-hold, the trigger times scaled by 0.5 .. 3.5 (an exaggerated change of
    # heart rate): the ES slices at the lowest rates lie nearer the ED trigger time (0) than the median ES one, so
    # only the rank at each position puts them in the ES volume
    for path in files:
        ds = pydicom.dcmread(path)
        ds.TriggerTime = str(round(float(ds.TriggerTime) * (0.25 + 0.25 * float(ds.SeriesNumber)), 1))
        ds.save_as(path)
    shutil.copy(files[0], tmp_path / "copy of first file")
    index = index_dicom(tmp_path)
    assert sorted(v.phase for v in index.volumes) == [0, 1]
    for volume in index.volumes:  # each volume holds one frame: its TemporalPositionIdentifier
        assert len({h["TemporalPositionIdentifier"] for h in volume.headers}) == 1
    (copy,) = index.skipped  # one of the two identical files, in folder-walk order the later one
    pair = {str(files[0]), str(tmp_path / "copy of first file")}
    (kept,) = pair - set(copy.files)
    assert set(copy.files) < pair and copy.reason == f"the same SOPInstanceUID as {kept} (a copy)"
