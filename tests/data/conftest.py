"""Fixtures of the tests of gcl_monai.data: ACDC in its official layout and as the SSL4MIS HDF5 files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.data_helpers import make_acdc_patient, write_h5


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
