"""Fixtures of the tests of gcl_monai.data.dicom: the phantom written as a DICOM archive, one series per slice
location."""

from __future__ import annotations

import pytest

from gcl_monai.data.dicom import write_phantom_dicom
from tests.data.dicom.dicom_helpers import NUM_PATIENTS, SIZE


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return write_phantom_dicom(
        tmp_path_factory.mktemp("dicom"), NUM_PATIENTS, seed=0, image_size=SIZE, layout="per_slice"
    )
