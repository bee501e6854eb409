"""The prostate reader: the multi-site and the Medical Segmentation Decathlon layouts, unpaired files, shapes, the
zone numbering told by place, and the real data (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from gcl_monai.data import (
    PROSTATE_LABEL_NAMES,
    DatalistError,
    detect_layout,
    load_datalist,
    peripheral_zone_label,
    read_prostate,
)
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


def _zonal_mask(path: Path, affine: np.ndarray, zones=(1, 2)) -> Path:
    """A hand-made axial cross-section on the (x, y) grid: a disc of label 2 (the transition zone) at y = 10 and a
    crescent of label 1 (the peripheral zone) behind it, y 13-16 (posterior at the higher index), on 3 slices."""
    x, y = np.meshgrid(np.arange(24), np.arange(24), indexing="ij")
    radius = np.hypot(x - 12, y - 10)
    plane = np.zeros((24, 24), np.uint8)
    plane[(radius > 4) & (radius <= 7) & (y >= 12)] = 1
    plane[radius <= 4] = 2
    mask = np.isin(plane, zones) * plane
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(np.repeat(mask[..., None], 3, axis=2), affine), path)
    return path


def test_zone_names():
    assert PROSTATE_LABEL_NAMES == {0: "background", 1: "PZ", 2: "TZ"}


def test_peripheral_zone_label_reads_the_affine(tmp_path: Path):
    # L-P-S voxel axes (as the multi-site masks): the higher y index is posterior, so label 1 is the peripheral zone
    assert peripheral_zone_label(_zonal_mask(tmp_path / "lps.nii.gz", np.diag([-1.0, -1.0, 1.0, 1.0]))) == 1
    # the same voxels under an R-A-S affine put label 1 in front: the numbering is swapped
    assert peripheral_zone_label(_zonal_mask(tmp_path / "ras.nii.gz", np.eye(4))) == 2


def test_peripheral_zone_label_needs_both_zones(tmp_path: Path):
    path = _zonal_mask(tmp_path / "whole_gland.nii.gz", np.eye(4), zones=(2,))
    with pytest.raises(DatalistError, match=r"whole_gland\.nii\.gz: no voxel of label 1"):
        peripheral_zone_label(path)


@pytest.mark.realdata
def test_real_prostate_zone_numbering():
    """Every multi-site mask numbers the peripheral zone 1, as PROSTATE_LABEL_NAMES says."""
    if not (DATA_ROOT / "prostate").is_dir():
        pytest.skip(f"no real prostate data under {DATA_ROOT}")
    masks = sorted((DATA_ROOT / "prostate" / "masks").glob("*.nii.gz"))
    assert len(masks) == 31
    assert {m.name: peripheral_zone_label(m) for m in masks} == {m.name: 1 for m in masks}


@pytest.mark.realdata
def test_real_prostate():
    if not (DATA_ROOT / "prostate").is_dir():
        pytest.skip(f"no real prostate data under {DATA_ROOT}")
    datalist = load_datalist(DATA_ROOT / "prostate")
    assert len(datalist) == 31
    assert len({d["patient"] for d in datalist}) == 31
