"""The dispatcher: a dataset folder's layout detected and read, unknown folders and meta labels refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcl_monai.data import DatalistError, detect_layout, load_datalist
from tests.data.data_helpers import write_nifti


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
