"""The prostate reader: the multi-site and the Medical Segmentation Decathlon layouts, unpaired files, shapes, and the
real data (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gcl_monai.data import DatalistError, detect_layout, load_datalist, read_prostate
from tests.data.data_helpers import DATA_ROOT, SHAPE, write_nifti


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


@pytest.mark.realdata
def test_real_prostate():
    if not (DATA_ROOT / "prostate").is_dir():
        pytest.skip(f"no real prostate data under {DATA_ROOT}")
    datalist = load_datalist(DATA_ROOT / "prostate")
    assert len(datalist) == 31
    assert len({d["patient"] for d in datalist}) == 31
