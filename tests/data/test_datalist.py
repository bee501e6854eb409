"""The helpers every dataset reader shares: HDF5 paths, NIfTI names, meta labels encoded, volumes collected."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcl_monai.data import split_h5_path


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


def test_nifti_stems_and_listing(tmp_path):
    from gcl_monai.data.datalist import list_nifti, nifti_stem

    assert nifti_stem("Case00.nii.gz") == "Case00" and nifti_stem("a.NII") == "a" and nifti_stem("b.Nii.Gz") == "b"
    assert nifti_stem("._Case00.nii.gz") is None and nifti_stem("a.h5") is None and nifti_stem("a.nii.gz.bak") is None
    for name in ("B.nii.gz", "a.nii", "._a.nii", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "c.nii.gz").mkdir()  # a folder is no volume
    assert list_nifti(tmp_path) == {"a": tmp_path / "a.nii", "b": tmp_path / "B.nii.gz"}


def test_meta_labels_encoded_by_hand():
    """Sorted unique values become 0..C-1 (numbers in numeric order, anything else by its text), the value kept as
    text under <key>_name; patient_id (re)assigned from the sorted patient names; slice_quantile left to the slicing."""
    from gcl_monai.data import encode_meta_labels, meta_num_classes

    datalist = [
        {"image": "a", "patient": "p2", "patient_id": None, "scanner": "siemens", "field": 10},
        {"image": "b", "patient": "p10", "patient_id": None, "scanner": "ge", "field": 9},
        {"image": "c", "patient": "p2", "patient_id": None, "scanner": "ge", "field": 1.5},
    ]
    mapping = encode_meta_labels(datalist, ["patient_id", "scanner", "field", "slice_quantile"])
    assert mapping == {"patient_id": ["p10", "p2"], "scanner": ["ge", "siemens"], "field": ["1.5", "9", "10"]}
    assert [d["patient_id"] for d in datalist] == [1, 0, 1]
    assert [(d["scanner"], d["scanner_name"]) for d in datalist] == [(1, "siemens"), (0, "ge"), (0, "ge")]
    assert [d["field"] for d in datalist] == [2, 1, 0] and "slice_quantile" not in datalist[0]
    assert meta_num_classes(datalist, "field") == 3 and meta_num_classes(datalist, "scanner") == 2
    with pytest.raises(ValueError, match=r"'site' is missing in 1 of 2 entries \(first: b\)"):
        encode_meta_labels([{"image": "a", "site": "x"}, {"image": "b"}], ["site"])
    with pytest.raises(ValueError, match="must hold scalars"):
        encode_meta_labels([{"image": "a", "site": ["x"]}], ["site"])


def test_collect_volumes_sorts_assigns_ids_and_skips_or_raises(caplog):
    from gcl_monai.data import DatalistError
    from gcl_monai.data.datalist import collect_volumes

    def bad():
        raise DatalistError("v3: unreadable")

    candidates = [
        ("v1", lambda: {"patient": "b", "image": "2.nii"}),
        ("v2", lambda: {"patient": "a", "image": "9.nii"}),
        ("v3", bad),
        ("v4", lambda: {"patient": "b", "image": "1.nii"}),
    ]
    items = collect_volumes(candidates, "skip", "demo", "/data")
    assert [(d["patient"], d["image"], d["patient_id"]) for d in items] == [
        ("a", "9.nii", 0),
        ("b", "1.nii", 1),
        ("b", "2.nii", 1),
    ]
    assert "kept 3 of 4 volumes in /data, skipped 1" in caplog.text
    with pytest.raises(DatalistError, match="v3: unreadable"):
        collect_volumes(candidates, "raise", "demo", "/data")
    with pytest.raises(DatalistError, match=r"/data: no usable demo volume found \(1 candidate\(s\), 1 skipped\)"):
        collect_volumes([("v3", bad)], "skip", "demo", "/data")
