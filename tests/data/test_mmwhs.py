"""The MM-WHS reader: CT and MR volumes, a missing label, a bad modality."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcl_monai.data import MMWHS_LABEL_VALUES, DatalistError, load_datalist, read_mmwhs
from tests.data.data_helpers import write_nifti


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
