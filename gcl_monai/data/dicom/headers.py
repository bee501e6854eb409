"""Reading the headers of a DICOM folder tree (pydicom, no pixel data), with a per-file cache so that a second
index of the same archive opens only the files that changed."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gcl_monai.utils import atomic_write

logger = logging.getLogger("gcl_monai.data")

__all__ = [
    "DEFAULT_KEYWORDS",
    "GEOMETRY_KEYWORDS",
    "UNREADABLE_KEY",
    "HeaderCache",
    "import_pydicom",
    "read_header",
    "scan_headers",
]

UNREADABLE_KEY = "_unreadable"
"""Key of the header of a DICOM file that pydicom cannot parse; its value is the reason."""

GEOMETRY_KEYWORDS = (
    "PatientID",
    "StudyInstanceUID",
    "SeriesInstanceUID",
    "SeriesNumber",
    "SOPInstanceUID",
    "SOPClassUID",
    "Modality",
    "InstanceNumber",
    "ImagePositionPatient",
    "ImageOrientationPatient",
    "PixelSpacing",
    "Rows",
    "Columns",
    "SliceThickness",
    "NumberOfFrames",
    "TriggerTime",
    "NominalInterval",
    "CardiacNumberOfImages",
    "TemporalPositionIdentifier",
)
"""Header values the index needs: identity, geometry and cardiac timing."""

DEFAULT_KEYWORDS = (
    "Manufacturer",
    "ManufacturerModelName",
    "MagneticFieldStrength",
    "InstitutionName",
    "SeriesDescription",
    "AcquisitionDate",
)
"""Further header values always read: the extra meta labels offered without re-reading the archive."""


def import_pydicom():
    """The pydicom module.

    Raises:
        ImportError: with the install command when pydicom is not installed.
    """
    try:
        import pydicom
    except ImportError as exc:  # optional dependency (extra "dicom")
        raise ImportError("Reading DICOM needs pydicom: pip install 'gcl-monai[dicom]'.") from exc
    return pydicom


def _json_value(value: Any) -> Any:
    """A header value as JSON: numbers stay numbers, multi-values become lists, the rest strings."""
    if value is None or isinstance(value, bool):
        return value
    for cast in (int, float):
        if isinstance(value, cast):  # pydicom's IS/DS are int/float subclasses: plain numbers, as read from the cache
            return cast(value)
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return [_json_value(v) for v in value]
    return str(value)


def read_header(path: str | Path, keywords: Sequence[str]) -> dict[str, Any] | None:
    """The requested header values of one file (``dcmread(stop_before_pixels=True, force=False)``).

    Args:
        path: the file.
        keywords: DICOM keywords to read; an absent element is stored as None.

    Returns:
        keyword -> value (JSON types); ``{UNREADABLE_KEY: reason}`` for a file that cannot be read or parsed (no
        permission, a header pydicom gives up on: reported, unlike a file that is not DICOM); None when the file is not
        DICOM (no ``DICM`` preamble: pydicom's ``InvalidDicomError``).
    """
    pydicom = import_pydicom()
    try:
        ds = pydicom.dcmread(str(path), stop_before_pixels=True, force=False)
    except pydicom.errors.InvalidDicomError as exc:
        logger.debug("%s: not DICOM (%s).", path, exc)
        return None
    except (EOFError, OSError, ValueError, TypeError, KeyError) as exc:  # what pydicom raises for a broken header
        return {UNREADABLE_KEY: f"unreadable ({type(exc).__name__}: {exc})"}
    header = {}
    for keyword in keywords:
        try:
            header[keyword] = _json_value(ds.get(keyword))
        except (ValueError, TypeError, OverflowError) as exc:  # a malformed element (a non-numeric DS): absent, logged
            logger.warning("%s: %s unreadable (%s); treated as absent.", path, keyword, exc)
            header[keyword] = None
    return header


class HeaderCache:
    """Header values per file, kept in a JSON file and reused while a file's size and modification time are the same.

    Args:
        path: the JSON file (None: no cache).
    """

    def __init__(self, path: str | Path | None):
        self.path = None if path is None else Path(path)
        self.entries: dict[str, dict] = {}
        if self.path is not None and self.path.is_file():
            try:
                self.entries = json.loads(self.path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                logger.warning("%s: unreadable header cache, rebuilt.", self.path)

    @staticmethod
    def _signature(path: Path) -> list[int]:
        stat = path.stat()
        return [stat.st_size, stat.st_mtime_ns]

    def get(self, path: Path, keywords: Sequence[str]) -> dict | None:
        """The cached entry of ``path`` (``{"dicom": bool, "header": {...}}``) when it is current and holds every
        keyword, else None."""
        entry = self.entries.get(str(path))
        if entry is None or entry["signature"] != self._signature(path):
            return None
        if entry["dicom"] and UNREADABLE_KEY not in entry["header"] and not set(keywords) <= set(entry["header"]):
            return None
        return entry

    def put(self, path: Path, header: dict | None) -> None:
        """Remember the header of ``path`` (None: not DICOM)."""
        self.entries[str(path)] = {
            "signature": self._signature(path),
            "dicom": header is not None,
            "header": header or {},
        }

    def save(self, files: Iterable[Path]) -> None:
        """Write the entries of ``files`` (entries of files no longer present are dropped)."""
        if self.path is None:
            return
        keep = {str(f) for f in files}
        with atomic_write(self.path) as partial:
            partial.write_text(json.dumps({k: v for k, v in self.entries.items() if k in keep}))


def scan_headers(
    root: str | Path, keywords: Sequence[str] = (), cache_file: str | Path | None = None
) -> tuple[dict[str, dict], list[str]]:
    """The headers of every DICOM file under ``root`` (any nesting, any file names; hidden files and folders are left
    out).

    Args:
        root: the archive folder.
        keywords: DICOM keywords read besides :data:`GEOMETRY_KEYWORDS` and :data:`DEFAULT_KEYWORDS`.
        cache_file: JSON file of a :class:`HeaderCache` (None: read every file).

    Returns:
        ``(headers, non_dicom)``: file path -> header values, sorted by path; and the files that are not DICOM.
    """
    wanted = list(dict.fromkeys([*GEOMETRY_KEYWORDS, *DEFAULT_KEYWORDS, *keywords]))
    cache = HeaderCache(cache_file)
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files.extend(Path(folder) / n for n in sorted(names) if not n.startswith("."))
    headers, non_dicom, opened = {}, [], 0
    for path in files:
        entry = cache.get(path, wanted)
        if entry is None:
            opened += 1
            cache.put(path, read_header(path, wanted))
            entry = cache.get(path, wanted)
        if entry["dicom"]:
            headers[str(path)] = entry["header"]
        else:
            non_dicom.append(str(path))
    cache.save(files)
    logger.info(
        "%s: %d DICOM file(s), %d other file(s); %d header(s) read, the rest from the cache.",
        root,
        len(headers),
        len(non_dicom),
        opened,
    )
    return headers, non_dicom
