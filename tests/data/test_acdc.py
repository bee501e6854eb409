"""The ACDC reader: the official layout (Info.cfg, ED/ES frames) and the HDF5 files, every bad-input case, skipping,
and the real data (skipped when absent)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gcl_monai.data import DatalistError, detect_layout, load_datalist, num_slices, read_acdc
from tests.data.data_helpers import DATA_ROOT, SHAPE, make_acdc_patient, write_garbage, write_h5, write_nifti


def test_acdc_official(acdc_official: Path):
    datalist = read_acdc(acdc_official)
    assert len(datalist) == 4
    assert [d["patient"] for d in datalist] == ["patient001"] * 2 + ["patient025"] * 2
    assert [d["patient_id"] for d in datalist] == [0, 0, 1, 1]
    assert [d["organ_state"] for d in datalist] == [0, 1, 0, 1]
    assert [d["group"] for d in datalist] == ["DCM", "DCM", "HCM", "HCM"]
    assert datalist[1]["image"].endswith("patient001_frame12.nii.gz")
    assert datalist[1]["label"].endswith("patient001_frame12_gt.nii.gz")
    assert all(d["dataset"] == "acdc" and "_4d" not in d["image"] for d in datalist)
    assert num_slices(datalist[0]) == SHAPE[2]


def test_acdc_official_testing_and_patient_folders(acdc_official: Path):
    testing = read_acdc(acdc_official, section="testing")
    assert [d["patient"] for d in testing] == ["patient101"] * 2
    assert "group" not in testing[0]
    assert len(read_acdc(acdc_official / "training")) == 4  # a folder of patient folders


def test_acdc_h5(acdc_h5: Path):
    datalist = read_acdc(acdc_h5)
    assert len(datalist) == 4
    assert datalist[0]["image"].endswith("patient001_frame01.h5#image")
    assert datalist[0]["label"].endswith("patient001_frame01.h5#label")
    assert [d["organ_state"] for d in datalist] == [0, 1, 0, 1]
    assert [d["group"] for d in datalist] == ["DCM", "DCM", "MINF", "MINF"]
    assert [d["patient_id"] for d in datalist] == [0, 0, 1, 1]
    assert num_slices(datalist[0]) == 6


def test_acdc_h5_data_subfolder(tmp_path: Path):
    for frame in (1, 2):
        write_h5(tmp_path / "data" / f"patient003_frame{frame:02d}.h5")
    write_h5(tmp_path / "data" / "slices" / "patient003_frame01_slice_1.h5")
    assert detect_layout(tmp_path) == ("acdc", "h5")
    assert len(load_datalist(tmp_path)) == 2


@pytest.mark.parametrize(
    "info, message",
    [
        (None, "Info.cfg not found"),
        ("ED: 1\nGroup: NOR\n", "missing 'ES:'"),
        ("ES: 12\n", "missing 'ED:'"),
        ("ED: one\nES: 12\n", "not an integer"),
        ("ED: 1\nES: 12\ngarbage line\n", "not 'Key: value'"),
        ("ED: 1\nES: 7\n", "neither ED (1) nor ES (7)"),
    ],
)
def test_acdc_bad_info_cfg(tmp_path: Path, info: str | None, message: str):
    pdir = make_acdc_patient(tmp_path / "training", 1)
    cfg = pdir / "Info.cfg"
    cfg.unlink() if info is None else cfg.write_text(info)
    with pytest.raises(DatalistError, match="Info.cfg") as err:
        read_acdc(tmp_path)
    assert message in str(err.value)


def test_acdc_missing_label(tmp_path: Path):
    pdir = make_acdc_patient(tmp_path / "training", 1)
    (pdir / "patient001_frame12_gt.nii.gz").unlink()
    with pytest.raises(DatalistError, match=r"patient001_frame12\.nii\.gz.*patient001_frame12_gt\.nii\.gz not found"):
        read_acdc(tmp_path)


def test_acdc_corrupt_nifti(tmp_path: Path):
    pdir = make_acdc_patient(tmp_path / "training", 1)
    write_garbage(pdir / "patient001_frame01.nii.gz")
    with pytest.raises(DatalistError, match=r"patient001_frame01\.nii\.gz: unreadable NIfTI"):
        read_acdc(tmp_path)


def test_acdc_shape_mismatch(tmp_path: Path):
    pdir = make_acdc_patient(tmp_path / "training", 1)
    write_nifti(pdir / "patient001_frame01_gt.nii.gz", shape=(16, 16, 5))
    with pytest.raises(DatalistError, match=r"frame01\.nii\.gz: image shape \(16, 16, 6\) does not match label shape"):
        read_acdc(tmp_path)


def test_acdc_missing_section(tmp_path: Path):
    make_acdc_patient(tmp_path / "training", 1)
    with pytest.raises(FileNotFoundError, match="testing"):
        read_acdc(tmp_path, section="testing")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: write_h5(p, keys=("image",)), r"'label'\] missing"),
        (lambda p: write_h5(p, label_shape=(5, 16, 16)), "does not match label shape"),
        (write_garbage, "unreadable HDF5"),
    ],
)
def test_acdc_h5_bad_volume(acdc_h5: Path, make, message: str):
    bad = make(acdc_h5 / "patient042_frame14.h5")
    with pytest.raises(DatalistError, match=message) as err:
        read_acdc(acdc_h5)
    assert str(bad) in str(err.value)


def test_acdc_h5_single_frame(acdc_h5: Path):
    (acdc_h5 / "patient042_frame14.h5").unlink()
    with pytest.raises(DatalistError, match=r"patient042_frame01\.h5: patient patient042 has 1 frame"):
        read_acdc(acdc_h5)


def test_on_error_skip_logs_and_keeps_rest(acdc_h5: Path, caplog: pytest.LogCaptureFixture):
    write_h5(acdc_h5 / "patient042_frame14.h5", keys=("image",))
    with caplog.at_level(logging.WARNING, logger="gcl_monai.data"):
        datalist = read_acdc(acdc_h5, on_error="skip")
    assert [d["patient"] for d in datalist] == ["patient001", "patient001", "patient042"]
    assert [d["patient_id"] for d in datalist] == [0, 0, 1]
    messages = [r.getMessage() for r in caplog.records]
    assert any("patient042_frame14.h5" in m and "missing" in m for m in messages)
    assert any("kept 3 of 4 volumes" in m and "skipped 1" in m for m in messages)
    with pytest.raises(ValueError, match="on_error"):
        read_acdc(acdc_h5, on_error="ignore")


@pytest.mark.realdata
def test_real_acdc():
    if not (DATA_ROOT / "acdc").is_dir():
        pytest.skip(f"no real ACDC data under {DATA_ROOT}")
    datalist = load_datalist(DATA_ROOT / "acdc")
    assert len(datalist) == 160
    assert len({d["patient"] for d in datalist}) == 80
    assert {d["patient_id"] for d in datalist} == set(range(80))
    assert sorted(d["organ_state"] for d in datalist) == [0] * 80 + [1] * 80
    assert {d["group"] for d in datalist} == {"DCM", "HCM", "MINF", "NOR", "RV"}
