"""Reading DICOM headers: the values as JSON types, hidden files left out, the cache that opens only changed files (and
drops the files gone), a file that cannot be read reported as such."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

pydicom = pytest.importorskip("pydicom")

from gcl_monai.data.dicom import index_dicom, write_phantom_dicom
from tests.data.dicom.dicom_helpers import SIZE


def test_header_cache_opens_only_changed_files(tmp_path, monkeypatch):
    from gcl_monai.data.dicom import headers

    write_phantom_dicom(tmp_path / "a", num_patients=1, image_size=SIZE)
    cache = tmp_path / "cache.json"
    first = index_dicom(tmp_path / "a", cache_file=cache)
    opened = []
    read = headers.read_header
    monkeypatch.setattr(headers, "read_header", lambda path, kw: opened.append(path) or read(path, kw))
    again = index_dicom(tmp_path / "a", cache_file=cache)
    assert opened == [] and [v.files for v in again.volumes] == [v.files for v in first.volumes]
    index_dicom(tmp_path / "a", keywords=["BodyPartExamined"], cache_file=cache)  # a keyword not cached yet
    assert len(opened) == sum(len(v.files) for v in first.volumes)


def test_a_file_that_cannot_be_read_is_reported_not_taken_for_non_dicom(tmp_path, monkeypatch):
    write_phantom_dicom(tmp_path, num_patients=1, image_size=SIZE)
    broken = min(tmp_path.rglob("IM*"))
    dcmread = pydicom.dcmread

    def failing(path, *args, **kwargs):
        if str(path) == str(broken):
            raise PermissionError(13, "Permission denied")
        return dcmread(path, *args, **kwargs)

    monkeypatch.setattr(pydicom, "dcmread", failing)
    index = index_dicom(tmp_path)
    assert index.non_dicom == []
    reasons = {f: s.reason for s in index.skipped for f in s.files}
    assert reasons[str(broken)] == "unreadable (PermissionError: [Errno 13] Permission denied)"


def test_scan_headers_reads_json_values_leaves_hidden_files_out_and_rereads_changed_files(tmp_path, caplog):
    from gcl_monai.data.dicom.headers import HeaderCache, scan_headers

    root = write_phantom_dicom(tmp_path / "a", num_patients=1, image_size=SIZE)
    files = sorted(str(p) for p in root.rglob("IM*"))
    (root / "notes.txt").write_text("not DICOM")
    (root / ".DS_Store").write_bytes(b"\x00" * 8)
    (root / ".hidden").mkdir()
    shutil.copy(files[0], root / ".hidden" / "IM_copy")
    cache = tmp_path / "cache.json"
    headers, non_dicom = scan_headers(root, ["InstitutionName", "ContrastBolusAgent"], cache)
    assert sorted(headers) == files and non_dicom == [str(root / "notes.txt")]  # nothing hidden
    first = headers[files[0]]
    assert first["InstitutionName"] == "Site A" and isinstance(first["Rows"], int) and first["Rows"] == SIZE[0]
    assert len(first["ImagePositionPatient"]) == 3 and all(type(v) is float for v in first["ImagePositionPatient"])
    assert first["ContrastBolusAgent"] is None  # asked for, absent from the file
    # a changed file (its size and time) is read again; an unchanged one comes from the cache
    ds = pydicom.dcmread(files[0])
    ds.InstitutionName = "Site C, renamed"
    ds.save_as(files[0])
    entries = json.loads(cache.read_text())
    assert set(entries) == {*files, str(root / "notes.txt")} and entries[str(root / "notes.txt")]["dicom"] is False
    again, _ = scan_headers(root, ["InstitutionName"], cache)
    assert again[files[0]]["InstitutionName"] == "Site C, renamed" and again[files[1]] == headers[files[1]]
    # entries of files gone are dropped; a cache that cannot be read is rebuilt
    Path(files[1]).unlink()
    scan_headers(root, ["InstitutionName"], cache)
    assert files[1] not in json.loads(cache.read_text())
    cache.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="gcl_monai.data"):
        assert HeaderCache(cache).entries == {}
    assert "unreadable header cache, rebuilt" in caplog.text
