"""The datalist command, ``python -m gcl_monai.data.dicom DIR --output datalist.json``: the entries, a summary of what
was skipped, an archive without DICOM."""

from __future__ import annotations

import json

import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data import load_datalist
from gcl_monai.data.dicom.__main__ import main
from tests.data.dicom.dicom_helpers import NUM_PATIENTS


def test_datalist_command_writes_entries_and_a_summary_of_what_was_skipped(archive, tmp_path, capsys):
    root = tmp_path / "archive"
    root.mkdir()
    for path in sorted(archive.rglob("*")):
        if path.is_file():
            target = root / path.relative_to(archive)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    (root / "README.txt").write_text("not DICOM")
    ds = pydicom.dcmread(next(root.rglob("IM01000")))
    ds.NumberOfFrames = 3
    ds.save_as(root / "multiframe.dcm")
    out = tmp_path / "out" / "datalist.json"
    assert (
        main(
            [
                str(root),
                "--output",
                str(out),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--meta-labels",
                "patient_id",
                "cardiac_phase",
                "Manufacturer",
            ]
        )
        == 0
    )
    content = json.loads(out.read_text())
    assert len(content["training"]) == 2 * NUM_PATIENTS
    assert content["summary"]["non_dicom_files"] == 1 and content["summary"]["non_dicom_examples"] == [
        str(root / "README.txt")
    ]
    (skip,) = content["summary"]["skipped"]
    assert skip["files"] == [str(root / "multiframe.dcm")] and skip["reason"].startswith("multi-frame image")
    printed = capsys.readouterr().out
    assert f"{2 * NUM_PATIENTS} volume(s) of {NUM_PATIENTS} patient(s)" in printed and "multi-frame" in printed
    # the written datalist is a decathlon-style JSON the project reads as any other
    again = load_datalist(out, meta_keys=["patient_id", "cardiac_phase"])
    assert [d["image"] for d in again] == [d["image"] for d in content["training"]]
    assert main([str(tmp_path / "cache"), "--output", str(tmp_path / "none.json")]) == 1  # no DICOM at all
