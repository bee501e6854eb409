"""The HVSMR reader: the cropped volumes and their labels, a missing label."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcl_monai.data import DatalistError, load_datalist, read_hvsmr
from tests.data.data_helpers import write_nifti


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
