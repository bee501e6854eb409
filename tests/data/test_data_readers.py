"""Dataset readers: tiny synthetic files in every layout, every bad-input case, and the real data."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import h5py
import nibabel as nib
import numpy as np
import pytest

from gcl_monai.data import (
    MMWHS_LABEL_VALUES,
    DatalistError,
    detect_layout,
    encode_meta_labels,
    load_datalist,
    meta_num_classes,
    num_slices,
    read_acdc,
    read_hvsmr,
    read_json_datalist,
    read_mmwhs,
    read_prostate,
    split_h5_path,
)

SHAPE = (16, 16, 6)
REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
DATA_ROOT = Path(os.environ.get("GCL_DATA_ROOT", REPO.parent / "shared" / "data"))


def write_nifti(path: Path, shape=SHAPE, dtype=np.int16) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(np.zeros(shape, dtype=dtype), np.eye(4)), path)
    return path


def write_h5(path: Path, image_shape=(6, 16, 16), label_shape=(6, 16, 16), keys=("image", "label")) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        if "image" in keys:
            f.create_dataset("image", data=np.zeros(image_shape, np.float32))
        if "label" in keys:
            f.create_dataset("label", data=np.zeros(label_shape, np.uint8))
    return path


def write_garbage(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"this is not a medical image" * 10)
    return path


def make_acdc_patient(folder: Path, number: int, ed: int = 1, es: int = 12, group: str | None = "DCM") -> Path:
    name = f"patient{number:03d}"
    pdir = folder / name
    pdir.mkdir(parents=True)
    group_line = f"Group: {group}\n" if group else ""
    info = f"ED: {ed}\nES: {es}\n{group_line}Height: 184.0\nNbFrame: 30\nWeight: 95.0\n"
    (pdir / "Info.cfg").write_text(info)
    for frame in (ed, es):
        write_nifti(pdir / f"{name}_frame{frame:02d}.nii.gz")
        write_nifti(pdir / f"{name}_frame{frame:02d}_gt.nii.gz", dtype=np.uint8)
    write_nifti(pdir / f"{name}_4d.nii.gz", shape=(*SHAPE, 3))
    return pdir


@pytest.fixture
def acdc_official(tmp_path: Path) -> Path:
    make_acdc_patient(tmp_path / "training", 1, es=12, group="DCM")
    make_acdc_patient(tmp_path / "training", 25, es=9, group="HCM")
    make_acdc_patient(tmp_path / "testing", 101, es=10, group=None)
    return tmp_path


@pytest.fixture
def acdc_h5(tmp_path: Path) -> Path:
    for number, frames in ((1, (1, 2)), (42, (1, 14))):
        for frame in frames:
            write_h5(tmp_path / f"patient{number:03d}_frame{frame:02d}.h5")
    return tmp_path


# ----------------------------------------------------------------------------------------------
# ACDC
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# prostate, MM-WHS, HVSMR
# ----------------------------------------------------------------------------------------------
def test_prostate_multisite(tmp_path: Path):
    for case, mask in (("Case00", "Case00_Segmentation"), ("Case07", "case07_segmentation")):
        write_nifti(tmp_path / "images" / f"{case}.nii.gz")
        write_nifti(tmp_path / "masks" / f"{mask}.nii.gz", dtype=np.uint8)
    datalist = read_prostate(tmp_path)
    assert [d["patient"] for d in datalist] == ["Case00", "Case07"]
    assert [d["patient_id"] for d in datalist] == [0, 1]
    assert datalist[1]["label"].endswith("case07_segmentation.nii.gz")
    assert all(d["dataset"] == "prostate" and "channel" not in d for d in datalist)


def test_prostate_msd(tmp_path: Path):
    (tmp_path / "dataset.json").write_text(json.dumps({"name": "Prostate", "training": []}))
    for i in (0, 16):
        write_nifti(tmp_path / "imagesTr" / f"prostate_{i:02d}.nii.gz", shape=(*SHAPE, 2))
        write_nifti(tmp_path / "labelsTr" / f"prostate_{i:02d}.nii.gz", dtype=np.uint8)
    (tmp_path / "imagesTr" / "._prostate_00.nii.gz").write_bytes(b"AppleDouble")
    assert detect_layout(tmp_path) == ("prostate", "msd")
    datalist = load_datalist(tmp_path)
    assert [(d["patient"], d["channel"]) for d in datalist] == [("prostate_00", 0), ("prostate_16", 0)]


@pytest.mark.parametrize(
    "remove, message",
    [
        ("masks/Case07_Segmentation.nii.gz", r"Case07\.nii\.gz: no matching label"),
        ("images/Case07.nii.gz", r"Case07_Segmentation\.nii\.gz: label file without a matching image"),
    ],
)
def test_prostate_unpaired(tmp_path: Path, remove: str, message: str):
    for case in ("Case00", "Case07"):
        write_nifti(tmp_path / "images" / f"{case}.nii.gz")
        write_nifti(tmp_path / "masks" / f"{case}_Segmentation.nii.gz")
    (tmp_path / remove).unlink()
    with pytest.raises(DatalistError, match=message):
        read_prostate(tmp_path)
    assert [d["patient"] for d in read_prostate(tmp_path, on_error="skip")] == ["Case00"]


def test_prostate_shape_mismatch(tmp_path: Path):
    write_nifti(tmp_path / "images" / "Case00.nii.gz")
    write_nifti(tmp_path / "masks" / "Case00_Segmentation.nii.gz", shape=(16, 15, 6))
    with pytest.raises(DatalistError, match=r"Case00\.nii\.gz: image shape .* does not match"):
        read_prostate(tmp_path)


def test_mmwhs(tmp_path: Path):
    for modality in ("ct", "mr"):
        for number in (1001, 1002):
            write_nifti(tmp_path / f"{modality}_train" / f"{modality}_train_{number}_image.nii.gz")
            write_nifti(tmp_path / f"{modality}_train" / f"{modality}_train_{number}_label.nii.gz")
    ct = load_datalist(tmp_path)
    assert [(d["patient"], d["modality"], d["patient_id"]) for d in ct] == [("1001", "ct", 0), ("1002", "ct", 1)]
    assert ct[0]["label"].endswith("ct_train_1001_label.nii.gz")
    assert [d["patient"] for d in read_mmwhs(tmp_path, modality="all")] == ["ct_1001", "ct_1002", "mr_1001", "mr_1002"]
    assert MMWHS_LABEL_VALUES == (205, 420, 500, 550, 600, 820, 850)
    (tmp_path / "mr_train" / "mr_train_1002_label.nii.gz").unlink()
    with pytest.raises(DatalistError, match=r"mr_train_1002_image\.nii\.gz: no matching label"):
        read_mmwhs(tmp_path, modality="mr")
    with pytest.raises(ValueError, match="modality"):
        read_mmwhs(tmp_path, modality="pet")


def test_hvsmr(tmp_path: Path):
    for n in (0, 3, 10):
        write_nifti(tmp_path / f"training_axial_crop_pat{n}.nii.gz")
        write_nifti(tmp_path / f"training_axial_crop_pat{n}-label.nii.gz")
    datalist = load_datalist(tmp_path, dataset="hvsmr")
    assert [d["patient"] for d in datalist] == ["pat0", "pat10", "pat3"]
    assert all(d["dataset"] == "hvsmr" for d in datalist)
    (tmp_path / "training_axial_crop_pat3-label.nii.gz").unlink()
    with pytest.raises(DatalistError, match=r"training_axial_crop_pat3\.nii\.gz: no matching '-label'"):
        read_hvsmr(tmp_path)


# ----------------------------------------------------------------------------------------------
# generic JSON datalists and meta labels
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def json_dataset(tmp_path: Path) -> Path:
    entries = []
    for i, (patient, state, scanner) in enumerate([("p2", "ES", "siemens"), ("p1", "ED", "ge"), ("p1", "ES", "ge")]):
        write_nifti(tmp_path / "img" / f"v{i}.nii.gz")
        write_nifti(tmp_path / "lab" / f"v{i}.nii.gz")
        entries.append(
            {
                "image": f"img/v{i}.nii.gz",
                "label": f"lab/v{i}.nii.gz",
                "patient_id": patient,
                "organ_state": state,
                "scanner": scanner,
            }
        )
    path = tmp_path / "mydata.json"
    path.write_text(json.dumps({"name": "MyData", "training": entries}))
    return path


def test_json_datalist(json_dataset: Path):
    datalist = read_json_datalist(json_dataset, meta_keys=["patient_id", "organ_state", "slice_quantile"])
    assert [d["patient"] for d in datalist] == ["p1", "p1", "p2"]
    assert [d["patient_id"] for d in datalist] == [0, 0, 1]
    assert [d["organ_state"] for d in datalist] == [0, 1, 1]
    assert [d["organ_state_name"] for d in datalist] == ["ED", "ES", "ES"]
    assert all(d["scanner"] in ("ge", "siemens") and d["dataset"] == "mydata" for d in datalist)
    assert Path(datalist[0]["image"]).is_absolute() and Path(datalist[0]["image"]).is_file()
    assert meta_num_classes(datalist, "organ_state") == 2
    mapping = encode_meta_labels(datalist, ["scanner"])
    assert mapping == {"scanner": ["ge", "siemens"]}
    assert load_datalist(json_dataset)[0]["organ_state"] == "ED"  # not encoded unless requested


def test_json_unknown_meta_label(json_dataset: Path):
    with pytest.raises(ValueError, match=r"'pathology'.*Available fields: .*organ_state.*scanner"):
        read_json_datalist(json_dataset, meta_keys=["pathology"])


def test_json_bad_entries(json_dataset: Path, tmp_path: Path):
    content = json.loads(json_dataset.read_text())
    content["training"].append({"image": "img/missing.nii.gz", "label": "lab/v0.nii.gz"})
    json_dataset.write_text(json.dumps(content))
    with pytest.raises(DatalistError, match=r"missing\.nii\.gz: file not found"):
        read_json_datalist(json_dataset)
    assert len(read_json_datalist(json_dataset, on_error="skip")) == 3
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(DatalistError, match="broken.json: malformed JSON"):
        load_datalist(tmp_path / "broken.json")
    with pytest.raises(DatalistError, match="expected a list under 'validation'"):
        read_json_datalist(json_dataset, section="validation")


def test_json_h5_paths(tmp_path: Path):
    write_h5(tmp_path / "vol.h5")
    entry = {"image": "vol.h5#image", "label": "vol.h5#label"}
    (tmp_path / "dataset.json").write_text(json.dumps({"training": [entry]}))
    assert detect_layout(tmp_path) == ("json", "json")
    (item,) = load_datalist(tmp_path)
    assert item["image"] == f"{tmp_path / 'vol.h5'}#image" and item["patient"] == "vol"


@pytest.mark.parametrize(
    "path, default, expected",
    [
        ("a.h5#image", None, ("a.h5", "image")),
        ("a.h5::image", None, ("a.h5", "image")),  # a '#' as MONAI's ConfigParser passes it on
        ("d/a.HDF5#grp/label", None, ("d/a.HDF5", "grp/label")),
        ("a.h5", None, ("a.h5", None)),
        ("a.h5", "image", ("a.h5", "image")),
        ("a.h5#", "image", ("a.h5", "image")),  # an empty name is no name
        ("run#2/a.nii.gz", None, ("run#2/a.nii.gz", None)),  # a '#' outside an HDF5 path is part of the path
        (Path("a.nii"), "image", ("a.nii", "image")),
    ],
)
def test_split_h5_path(path, default, expected):
    assert split_h5_path(path, default) == expected


# ----------------------------------------------------------------------------------------------
# dispatcher
# ----------------------------------------------------------------------------------------------
def test_load_datalist_acdc_official(acdc_official: Path):
    assert detect_layout(acdc_official) == ("acdc", "official")
    assert len(load_datalist(acdc_official, dataset="acdc", section="testing")) == 2


def test_load_datalist_acdc_h5(acdc_h5: Path):
    assert detect_layout(acdc_h5) == ("acdc", "h5")
    assert len(load_datalist(acdc_h5, meta_keys=["patient_id", "slice_quantile", "organ_state"])) == 4


def test_load_datalist_missing_or_unknown_folder(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=r"(?s)nowhere.*does not exist.*patientXXX_frameYY\.h5.*CaseNN"):
        load_datalist(tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(DatalistError, match=r"(?s)matches no known dataset layout.*acdc \(official\).*hvsmr"):
        load_datalist(tmp_path)
    with pytest.raises(DatalistError, match=r"(?s)matches no known prostate layout.*masks/CaseNN_Segmentation"):
        load_datalist(tmp_path, dataset="prostate")
    with pytest.raises(ValueError, match="Unknown dataset 'brats'"):
        load_datalist(tmp_path, dataset="brats")


def test_load_datalist_meta_label_not_in_dataset(tmp_path: Path):
    write_nifti(tmp_path / "images" / "Case00.nii.gz")
    write_nifti(tmp_path / "masks" / "Case00_Segmentation.nii.gz")
    with pytest.raises(ValueError, match=r"Unknown meta label 'organ_state'.*Available fields"):
        load_datalist(tmp_path, meta_keys=["patient_id", "organ_state"])


# ----------------------------------------------------------------------------------------------
# real data (skipped when absent)
# ----------------------------------------------------------------------------------------------
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


@pytest.mark.realdata
def test_real_prostate():
    if not (DATA_ROOT / "prostate").is_dir():
        pytest.skip(f"no real prostate data under {DATA_ROOT}")
    datalist = load_datalist(DATA_ROOT / "prostate")
    assert len(datalist) == 31
    assert len({d["patient"] for d in datalist}) == 31


def test_json_test_section_of_image_paths(json_dataset: Path):
    """MONAI's decathlon layout: a "test" list of plain image paths, resolved against the JSON's folder."""
    content = json.loads(json_dataset.read_text())
    content["test"] = ["img/v0.nii.gz", "img/v1.nii.gz"]
    content["validation"] = [3]
    json_dataset.write_text(json.dumps(content))
    test = read_json_datalist(json_dataset, section="test")
    assert [d["image"] for d in test] == [str(json_dataset.parent / "img" / f"v{i}.nii.gz") for i in (0, 1)]
    assert [d["patient"] for d in test] == ["v0", "v1"] and "label" not in test[0]
    with pytest.raises(DatalistError, match=r"mydata\.json\[validation\]"):
        read_json_datalist(json_dataset, section="validation")
