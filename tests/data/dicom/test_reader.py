"""DICOM archive -> datalist: the round trip phantom -> DICOM -> index -> NIfTI volumes equal to the phantom's, the
meta labels from the headers (patient, cardiac phase bins, end-diastole, DICOM keywords, hashing, fallbacks and
errors), the one-time conversion, the datalist command, and the datalist used downstream unchanged."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data import DatalistError, detect_layout, load_datalist, split_patients
from gcl_monai.data.acdc import ACDC_GROUPS
from gcl_monai.data.dicom import read_dicom, write_phantom_dicom
from gcl_monai.data.phantom import synthesize_patient
from gcl_monai.transforms import volume_transforms
from tests.data.dicom.dicom_helpers import NUM_PATIENTS, SIZE


def test_round_trip_volumes_and_meta_labels_equal_the_phantom(archive, tmp_path):
    datalist = read_dicom(archive, ["patient_id", "slice_quantile", "cardiac_phase", "end_diastole"], tmp_path)
    assert len(datalist) == 2 * NUM_PATIENTS
    for item in datalist:
        i = int(item["patient"][-3:]) - 1
        info, frames = synthesize_patient(np.random.default_rng([0, i]), ACDC_GROUPS[i * 5 // NUM_PATIENTS], SIZE)
        frame = 1 if item["end_diastole"] else info["ES"]
        image = nib.load(item["image"])
        np.testing.assert_array_equal(np.asarray(image.dataobj), frames[frame][0])  # voxel for voxel, base first
        np.testing.assert_allclose(image.header.get_zooms(), info["spacing"], rtol=1e-5)
        rr = 800.0 + 20.0 * i
        assert item["trigger_time"] == pytest.approx((frame - 1) * rr / info["NbFrame"], abs=1e-3)
        assert item["cardiac_phase"] == int(4 * (frame - 1) / info["NbFrame"])
        assert item["patient_id"] == i and item["dataset"] == "dicom"
        assert item["num_slices"] == frames[frame][0].shape[2]
        assert len(item["series"].split(", ")) == item["num_slices"]  # one series per slice location
    assert sum(item["end_diastole"] for item in datalist) == NUM_PATIENTS


def test_dicom_datalist_flows_downstream_unchanged(archive, tmp_path, monkeypatch):
    monkeypatch.setenv("GCL_DICOM_CACHE", str(tmp_path))
    datalist = load_datalist(archive, meta_keys=["patient_id", "slice_quantile", "cardiac_phase"])
    assert {d["dataset"] for d in datalist} == {"dicom"}
    split = split_patients(datalist, num_pretrain=1, num_val=1, num_test=1, seed=0, stratify_key=None)
    assert sum(len(v) for v in split.values()) == len(datalist)
    slices = volume_transforms(image_size=16, meta_keys=["patient_id", "cardiac_phase"], with_label=False)(datalist[0])
    assert len(slices) == datalist[0]["num_slices"]
    assert [int(s["slice_quantile"]) for s in slices] == sorted(int(s["slice_quantile"]) for s in slices)
    assert {int(s["cardiac_phase"]) for s in slices} == {datalist[0]["cardiac_phase"]}
    assert tuple(slices[0]["image"].shape) == (1, 16, 16)


def test_a_stack_without_trigger_time_has_no_cardiac_phase(tmp_path):
    from pydicom.data import get_testdata_file

    small = get_testdata_file("CT_small.dcm")
    ct5n = small and Path(small).parent / "dicomdirtests" / "98892001" / "CT5N"
    if not ct5n or not ct5n.is_dir():
        pytest.skip("pydicom's dicomdirtests archive is not installed with this pydicom")
    (item,) = read_dicom(ct5n, ["patient_id", "slice_quantile"], tmp_path)
    assert item["num_slices"] == 5 and "trigger_time" not in item and nib.load(item["image"]).shape == (16, 16, 5)
    series = pydicom.dcmread(next(ct5n.iterdir()), stop_before_pixels=True).SeriesInstanceUID
    with pytest.raises(DatalistError, match=f"TriggerTime \\(0018,1060\\) missing in series {series}: no cardiac"):
        read_dicom(ct5n, ["patient_id", "cardiac_phase"], tmp_path, on_error="raise")


def test_an_archive_with_acdc_like_folder_names_is_detected_as_dicom(tmp_path):
    root = write_phantom_dicom(tmp_path / "export", 1, image_size=SIZE)
    (root / "pt001").rename(root / "patient001")  # the name the ACDC layout looks for
    assert detect_layout(root) == ("dicom", "dicom")  # DICOM is looked for first: its files, not folder names
