"""Meta labels from DICOM headers: cardiac phase bins by hand, DICOM keywords as meta labels, hashed patient ids,
a missing tag named with its series or a fallback for the RR interval."""

from __future__ import annotations

import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data import DatalistError
from gcl_monai.data.dicom import cardiac_phase, hash_patient, index_dicom, read_dicom, rr_interval, write_phantom_dicom
from tests.data.dicom.dicom_helpers import NUM_PATIENTS, SIZE


def test_cardiac_phase_bins_by_hand():
    assert [cardiac_phase(t, 800.0, 4) for t in (0.0, 199.9, 200.0, 420.0, 799.0, 900.0)] == [0, 0, 1, 2, 3, 3]
    assert cardiac_phase(300.0, 800.0, 2) == 0 and cardiac_phase(400.0, 800.0, 2) == 1
    with pytest.raises(ValueError, match="phase_bins"):
        cardiac_phase(0.0, 800.0, 0)


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
