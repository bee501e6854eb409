"""Generic JSON datalists: meta labels encoded on request, bad entries, HDF5 paths, a test section of image paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcl_monai.data import (
    DatalistError,
    detect_layout,
    encode_meta_labels,
    load_datalist,
    meta_num_classes,
    read_json_datalist,
)
from tests.data.data_helpers import write_h5, write_nifti


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
