"""The inference cases of a DICOM folder (gcl_monai.data.dicom.inference): one case folder of links per volume, named
by patient, series, trigger time and slices, in the index's order; a rejected stack a case marked skipped; a second
run over the same staging folder. (test_dicom_inference.py: tests/bundles holds a test_inference.py.)"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data.dicom import index_dicom, write_phantom_dicom
from gcl_monai.data.dicom.inference import SKIPPED_KEY, dicom_inference_cases
from tests.data.dicom.dicom_helpers import SIZE


def test_one_case_per_volume_and_a_skipped_case_per_rejected_stack(tmp_path):
    root = write_phantom_dicom(tmp_path / "archive", num_patients=2, image_size=SIZE, layout="single_series")
    (root / "notes.txt").write_text("not DICOM")  # no case
    es = sorted(
        (p for p in (root / "pt002").rglob("IM*") if float(pydicom.dcmread(p).TriggerTime) > 0),
        key=lambda p: float(pydicom.dcmread(p).SliceLocation),
    )
    es[2].unlink()  # patient 2's ES stack loses a middle slice: rejected
    index = index_dicom(root)
    cases = dicom_inference_cases(root, tmp_path / "cases")
    assert len(cases) == 4 and len(index.volumes) == 3
    for case, volume in zip(cases, index.volumes):
        folder = Path(case["image"])
        assert folder.parent == tmp_path / "cases" and folder.name == case["case"] and SKIPPED_KEY not in case
        links = sorted(folder.iterdir())
        assert [p.name for p in links] == [f"{n:04d}.dcm" for n in range(len(volume.files))]
        assert all(p.is_symlink() for p in links) and [os.readlink(p) for p in links] == volume.files
        time = f"_t{volume.trigger_time:.0f}ms"
        assert case["case"] == f"{volume.patient}_series1{time}_{volume.volume_id[:6]}"
    assert {c["case"].split("_series")[0] for c in cases[:3]} == {"patient001", "patient002"}
    (skipped,) = [c for c in cases if SKIPPED_KEY in c]
    assert skipped is cases[-1] and "slice missing" in skipped[SKIPPED_KEY]
    assert skipped["case"] == f"series {index.skipped[0].series[0]}" and skipped["image"] == index.skipped[0].files[0]
    # a second run over the same staging folder, the archive moved: the links follow the files
    shutil.move(root, tmp_path / "moved")
    again = dicom_inference_cases(tmp_path / "moved", tmp_path / "cases")
    assert [c["case"] for c in again] != [] and [c["case"] for c in again[:3]] == [c["case"] for c in cases[:3]]
    first = Path(again[0]["image"]) / "0000.dcm"
    assert os.readlink(first).startswith(str(tmp_path / "moved")) and first.resolve().is_file()


def test_the_default_staging_folder_is_a_new_temporary_one(tmp_path):
    root = write_phantom_dicom(tmp_path / "archive", num_patients=1, image_size=SIZE, layout="per_slice")
    cases = dicom_inference_cases(root)
    try:
        staging = Path(cases[0]["image"]).parent
        assert staging.name.startswith("gcl_dicom_cases_") and len(cases) == 2
        # per-slice series: the case names the range of series numbers
        assert "_series1-" in cases[0]["case"] and "_t0ms_" in cases[0]["case"] + cases[1]["case"]
    finally:
        shutil.rmtree(Path(cases[0]["image"]).parent)
