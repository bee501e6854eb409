"""DICOM archive -> datalist: the round trip phantom -> DICOM -> index -> NIfTI volumes equal to the phantom's, the
meta labels from the headers (patient, cardiac phase bins, end-diastole, DICOM keywords, hashing, fallbacks and
errors), the one-time conversion, the datalist command, and the datalist used downstream unchanged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data import DatalistError, detect_layout, load_datalist, split_patients
from gcl_monai.data.acdc import ACDC_GROUPS
from gcl_monai.data.dicom import (
    cardiac_phase,
    hash_patient,
    index_dicom,
    read_dicom,
    rr_interval,
    write_phantom_dicom,
)
from gcl_monai.data.dicom.__main__ import main
from gcl_monai.data.phantom import synthesize_patient
from gcl_monai.transforms import volume_transforms

SIZE = (32, 32)
NUM_PATIENTS = 3


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_phantom_dicom(
        tmp_path_factory.mktemp("dicom"), NUM_PATIENTS, seed=0, image_size=SIZE, layout="per_slice"
    )


def test_cardiac_phase_bins_by_hand():
    assert [cardiac_phase(t, 800.0, 4) for t in (0.0, 199.9, 200.0, 420.0, 799.0, 900.0)] == [0, 0, 1, 2, 3, 3]
    assert cardiac_phase(300.0, 800.0, 2) == 0 and cardiac_phase(400.0, 800.0, 2) == 1
    with pytest.raises(ValueError, match="phase_bins"):
        cardiac_phase(0.0, 800.0, 0)


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


def test_volumes_are_converted_once(archive, tmp_path):
    first = read_dicom(archive, ["patient_id"], tmp_path)
    stamps = {d["image"]: os.stat(d["image"]).st_mtime_ns for d in first}
    again = read_dicom(archive, ["patient_id"], tmp_path)
    assert {d["image"]: os.stat(d["image"]).st_mtime_ns for d in again} == stamps


def test_dicom_keywords_are_meta_labels_and_patient_ids_can_be_hashed(archive, tmp_path):
    datalist = read_dicom(
        archive,
        ["patient_id", "MagneticFieldStrength", "InstitutionName"],
        tmp_path,
        hash_patient_id=True,
        salt="s3cret",
    )
    site = {
        hash_patient(f"patient{i + 1:03d}", "s3cret"): ("1.5", "Site A") if i % 2 == 0 else ("3.0", "Site B")
        for i in range(NUM_PATIENTS)
    }
    assert sorted({d["patient"] for d in datalist}) == sorted(site)
    for item in datalist:
        assert "series" not in item  # the UIDs are left out of pseudonymised entries too
        assert (item["MagneticFieldStrength_name"], item["InstitutionName_name"]) == site[item["patient"]]
        assert item["MagneticFieldStrength"] == {"1.5": 0, "3.0": 1}[item["MagneticFieldStrength_name"]]
    with pytest.raises(ValueError, match=r"Unknown meta label\(s\) \['ScannerName'\]"):
        read_dicom(archive, ["patient_id", "ScannerName"], tmp_path)


def test_a_missing_tag_is_named_with_its_series_or_falls_back(tmp_path):
    root = write_phantom_dicom(tmp_path / "a", 2, image_size=SIZE)
    patient2 = sorted((root / "pt002").rglob("IM*"))
    for path in patient2:
        ds = pydicom.dcmread(path)
        del ds.InstitutionName, ds.NominalInterval
        ds.save_as(path)
    series = pydicom.dcmread(patient2[0]).SeriesInstanceUID
    with pytest.raises(DatalistError, match=f"InstitutionName missing in series {series}"):
        read_dicom(root, ["patient_id", "InstitutionName"], tmp_path / "c", on_error="raise")
    kept = read_dicom(root, ["patient_id", "InstitutionName"], tmp_path / "c")  # skipped, named in the log
    assert {d["patient"] for d in kept} == {"patient001"}
    # NominalInterval missing: RR from the cine's last trigger time and CardiacNumberOfImages
    index = index_dicom(root)
    es = next(v for v in index.volumes if v.patient == "patient002" and v.phase == 1)
    frames = es.headers[0]["CardiacNumberOfImages"]
    assert rr_interval(es) == pytest.approx(es.trigger_time * frames / (frames - 1))
    es.headers[0]["CardiacNumberOfImages"] = None
    es.stack_trigger_times = [0.0]
    with pytest.raises(ValueError, match=f"NominalInterval \\(0018,1062\\) missing in series {series}"):
        rr_interval(es)


def test_datalist_command_writes_entries_and_a_summary_of_what_was_skipped(archive, tmp_path, capsys):
    root = tmp_path / "archive"
    root.mkdir()
    for path in sorted(archive.rglob("*")):
        if path.is_file():
            target = root / path.relative_to(archive)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (root / "README.txt").write_text("not DICOM")
    ds = pydicom.dcmread(next(root.rglob("IM01000")))
    ds.NumberOfFrames = 3
    ds.save_as(root / "multiframe.dcm")
    out = tmp_path / "out" / "datalist.json"
    assert (
        main(
            [
                str(root),
                "--output",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--meta-labels",
                "patient_id",
                "cardiac_phase",
                "Manufacturer",
            ]
        )
        == 0
    )
    content = json.loads(out.read_text())
    assert len(content["training"]) == 2 * NUM_PATIENTS
    assert content["summary"]["non_dicom_files"] == 1 and content["summary"]["non_dicom_examples"] == [
        str(root / "README.txt")
    ]
    (skip,) = content["summary"]["skipped"]
    assert skip["files"] == [str(root / "multiframe.dcm")] and skip["reason"].startswith("multi-frame image")
    printed = capsys.readouterr().out
    assert f"{2 * NUM_PATIENTS} volume(s) of {NUM_PATIENTS} patient(s)" in printed and "multi-frame" in printed
    # the written datalist is a decathlon-style JSON the project reads as any other
    again = load_datalist(out, meta_keys=["patient_id", "cardiac_phase"])
    assert [d["image"] for d in again] == [d["image"] for d in content["training"]]
    assert main([str(tmp_path / "cache"), "--output", str(tmp_path / "none.json")]) == 1  # no DICOM at all


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
