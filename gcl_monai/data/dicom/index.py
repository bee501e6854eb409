"""The index of a DICOM folder tree: files grouped into 3D volumes by patient, study, stack (orientation) and cardiac
phase, slices ordered by their position along the slice normal; every stack that is not a clean volume (a missing
slice, mixed spacing or matrix size, duplicate positions) is reported by series and file and skipped, and a series of
several orientations is split into one stack per orientation.

Two cine layouts are handled: one series holding every slice and phase, and one series per slice location holding its
phases (such series are stacked by patient, study and orientation). Within a stack the phase of a slice is the rank of
its TriggerTime at its position, matched by nearest trigger time where a position lacks a phase.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gcl_monai.data.dicom.headers import UNREADABLE_KEY, scan_headers

logger = logging.getLogger("gcl_monai.data")

__all__ = ["DicomIndex", "DicomVolume", "Skipped", "index_dicom", "slice_normal"]

ORIENTATION_DECIMALS = 3
"""ImageOrientationPatient values equal to this many decimals belong to the same stack."""
POSITION_TOLERANCE_MM = 0.01
"""Slices closer than this along the normal share a position."""
SPACING_TOLERANCE = 0.1
"""Largest relative deviation of a gap between neighbouring slices from the median gap before a slice counts as
missing."""

_REQUIRED = ("ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing", "Rows", "Columns")


@dataclass
class DicomVolume:
    """One 3D volume of the archive."""

    files: list[str]
    """The slices, ordered by position along the slice normal."""
    positions: list[float]
    """Position of each slice along the normal (mm)."""
    headers: list[dict[str, Any]]
    """Header values of each slice (same order)."""
    trigger_time: float | None
    """Mean TriggerTime of the slices (ms), None for a volume without cardiac timing."""
    phase: int | None
    """Rank of the volume's trigger time among the phases of its stack (0 = earliest), None without timing."""
    stack_trigger_times: list[float] = field(default_factory=list)
    """The trigger times of every phase of the volume's stack (ms, ascending)."""

    @property
    def patient(self) -> str:
        return str(self.headers[0]["PatientID"])

    @property
    def series(self) -> list[str]:
        """The SeriesInstanceUIDs of the slices (one in the single-series layout)."""
        return sorted({str(h["SeriesInstanceUID"]) for h in self.headers})

    @property
    def volume_id(self) -> str:
        """A name that changes when any slice changes: a hash of the slices' SOPInstanceUIDs."""
        uids = "\n".join(str(h["SOPInstanceUID"]) for h in self.headers)
        return hashlib.sha1(uids.encode()).hexdigest()[:16]


@dataclass
class Skipped:
    """Files left out of every volume, and why."""

    reason: str
    files: list[str]
    series: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        where = f"series {', '.join(self.series)}" if self.series else "files"
        shown = ", ".join(self.files[:3]) + (f" and {len(self.files) - 3} more" if len(self.files) > 3 else "")
        return f"{where} ({len(self.files)} file(s): {shown}): {self.reason}"


@dataclass
class DicomIndex:
    """The volumes of an archive and what was left out."""

    root: str
    volumes: list[DicomVolume]
    skipped: list[Skipped]
    non_dicom: list[str]

    def summary(self) -> dict[str, Any]:
        """Counts and reasons, for the datalist command's report."""
        return {
            "root": self.root,
            "volumes": len(self.volumes),
            "dicom_files_used": sum(len(v.files) for v in self.volumes),
            "non_dicom_files": len(self.non_dicom),
            "non_dicom_examples": self.non_dicom[:5],
            "skipped": [{"reason": s.reason, "series": s.series, "files": s.files} for s in self.skipped],
        }


def slice_normal(orientation: Sequence[float]) -> np.ndarray:
    """The slice normal: the cross product of ImageOrientationPatient's row and column direction cosines."""
    o = np.asarray(orientation, dtype=float)
    return np.cross(o[:3], o[3:])


def _first_problem(header: dict[str, Any]) -> str | None:
    if UNREADABLE_KEY in header:
        return header[UNREADABLE_KEY]
    missing = [k for k in _REQUIRED if header.get(k) is None]
    if missing:
        return f"not a cross-sectional image: {', '.join(missing)} missing"
    if (header.get("NumberOfFrames") or 1) > 1:
        return f"multi-frame image ({header['NumberOfFrames']} frames): not supported, export single-frame images"
    if not header.get("PatientID"):
        return "PatientID (0010,0020) missing or empty"
    if not header.get("StudyInstanceUID") or not header.get("SeriesInstanceUID"):
        return "StudyInstanceUID or SeriesInstanceUID missing"
    return None


def _skip(reason: str, files: list[str], headers: dict[str, dict]) -> Skipped:
    series = sorted({str(headers[f].get("SeriesInstanceUID")) for f in files if headers[f].get("SeriesInstanceUID")})
    return Skipped(reason, sorted(files), series)


def _phases(files: list[str], headers: dict[str, dict], position: dict[str, float]) -> tuple[dict[str, int], list]:
    """Phase of each slice of a stack: the rank of its TriggerTime at its position, matched by nearest median trigger
    time at positions lacking a phase.

    Raises:
        ValueError: for duplicate positions (two slices of one position and phase, or no TriggerTime).
    """
    at: dict[float, list[str]] = defaultdict(list)
    for f in files:
        at[position[f]].append(f)
    if any(headers[f].get("TriggerTime") is None for f in files):
        crowded = [p for p, fs in at.items() if len(fs) > 1]
        if crowded:
            raise ValueError(
                f"duplicate slice positions without TriggerTime (at {crowded[0]:.2f} mm along the normal: "
                f"{', '.join(sorted(at[crowded[0]]))})"
            )
        return {f: 0 for f in files}, []
    count = max(len(fs) for fs in at.values())
    full = [sorted(float(headers[f]["TriggerTime"]) for f in fs) for fs in at.values() if len(fs) == count]
    medians = np.median(np.array(full), axis=0)
    phase = {}
    for p, fs in at.items():
        if len(fs) == count:  # every phase present: the rank (robust to a heart rate that differs between positions)
            phase.update((f, rank) for rank, f in enumerate(sorted(fs, key=lambda f: float(headers[f]["TriggerTime"]))))
            continue
        for f in fs:
            phase[f] = int(np.argmin(np.abs(medians - float(headers[f]["TriggerTime"]))))
        taken = [phase[f] for f in fs]
        if len(set(taken)) < len(taken):
            raise ValueError(
                f"duplicate slice positions: {len(fs)} slices at {p:.2f} mm along the normal share a "
                f"trigger time ({', '.join(sorted(fs))})"
            )
    return phase, [float(m) for m in medians]


def _stack_volumes(files: list[str], headers: dict[str, dict]) -> tuple[list[DicomVolume], list[Skipped]]:
    """The volumes of one stack (same patient, study and orientation), one per cardiac phase, and the phases left out
    for a missing slice.

    Raises:
        ValueError: naming the inconsistency that spoils the whole stack: mixed matrix size or pixel spacing,
            duplicate positions, or a gap in the slice positions of every phase.
    """
    for key in ("Rows", "Columns", "PixelSpacing"):
        values = {json.dumps(headers[f][key]) for f in files}
        if len(values) > 1:
            raise ValueError(f"mixed {key}: {', '.join(sorted(values))}")
    normal = slice_normal(headers[files[0]]["ImageOrientationPatient"])
    raw = {f: float(np.dot(headers[f]["ImagePositionPatient"], normal)) for f in files}
    levels: list[float] = []
    for value in sorted(raw.values()):
        if not levels or value - levels[-1] > POSITION_TOLERANCE_MM:
            levels.append(value)
    position = {f: min(levels, key=lambda level, v=v: abs(level - v)) for f, v in raw.items()}
    if len(levels) < 2:
        raise ValueError("a single slice position: not a 3D volume")
    gaps = np.diff(levels)
    median = float(np.median(gaps))
    odd = [i for i, g in enumerate(gaps) if abs(g - median) > SPACING_TOLERANCE * median]
    if odd:
        i = odd[0]
        raise ValueError(
            f"missing slice(s): gap of {gaps[i]:.2f} mm between {levels[i]:.2f} and {levels[i + 1]:.2f} "
            f"mm along the normal, where slices are {median:.2f} mm apart"
        )
    phase, trigger_times = _phases(files, headers, position)
    volumes, skipped = [], []
    for t in sorted(set(phase.values())):
        members = sorted((f for f in files if phase[f] == t), key=lambda f: position[f])
        lacking = sorted(set(levels) - {position[f] for f in members})
        if lacking:
            when = f" at trigger time {trigger_times[t]:.0f} ms" if trigger_times else ""
            skipped.append(
                _skip(
                    f"slice missing at {lacking[0]:.2f} mm along the normal{when} ({len(members)} of "
                    f"{len(levels)} positions present)",
                    members,
                    headers,
                )
            )
            continue
        triggers = [headers[f].get("TriggerTime") for f in members]
        volumes.append(
            DicomVolume(
                files=members,
                positions=[raw[f] for f in members],
                headers=[headers[f] for f in members],
                trigger_time=float(np.mean(triggers)) if trigger_times else None,
                phase=t if trigger_times else None,
                stack_trigger_times=trigger_times,
            )
        )
    return volumes, skipped


def index_dicom(root: str | Path, keywords: Sequence[str] = (), cache_file: str | Path | None = None) -> DicomIndex:
    """Index a DICOM folder tree into 3D volumes.

    Files are read with pydicom (headers only); a file that is not DICOM is counted and left out. A file that is not
    a single-frame cross-sectional image with ImagePositionPatient, ImageOrientationPatient, PixelSpacing and a
    PatientID (a DICOMDIR, a radiograph, a structured report), or that repeats the SOPInstanceUID of a file before it
    (a copy), is skipped with the reason. The images of a series are split by orientation
    (:data:`ORIENTATION_DECIMALS`); a part with two or more slice positions is a stack; parts with a single position
    (the one-series-per-slice cine layout, or a lone slice) are pooled by patient, study and orientation into stacks.
    Each stack gives one volume per cardiac phase, slices ordered by position along the normal (not by
    InstanceNumber). A stack that is not clean is skipped whole, with its series, files and reason.

    Args:
        root: the archive folder.
        keywords: further DICOM keywords to read (extra meta labels).
        cache_file: header cache (see :class:`~gcl_monai.data.dicom.headers.HeaderCache`); None reads every file.

    Returns:
        The :class:`DicomIndex`.

    Raises:
        FileNotFoundError: when ``root`` is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        state = "is not a folder" if root.exists() else "does not exist"
        raise FileNotFoundError(f"DICOM folder {str(root)!r} {state}.")
    headers, non_dicom = scan_headers(root, keywords, cache_file)
    skipped: list[Skipped] = []
    images: dict[str, list[str]] = defaultdict(list)
    problems: dict[str, list[str]] = defaultdict(list)
    first_of: dict[str, str] = {}
    for f, h in headers.items():
        problem = _first_problem(h)
        uid = h.get("SOPInstanceUID")
        if problem is None and uid and first_of.setdefault(str(uid), f) != f:
            problem = f"the same SOPInstanceUID as {first_of[str(uid)]} (a copy)"
        if problem is None:
            images[str(h["SeriesInstanceUID"])].append(f)
        else:
            problems[problem].append(f)
    skipped.extend(_skip(reason, files, headers) for reason, files in problems.items())
    stacks: list[list[str]] = []
    pools: dict[tuple, list[str]] = defaultdict(list)
    for files in images.values():
        parts: dict[tuple, list[str]] = defaultdict(list)
        for f in files:
            parts[tuple(np.round(headers[f]["ImageOrientationPatient"], ORIENTATION_DECIMALS) + 0.0)].append(f)
        for orientation, part in parts.items():
            normal = slice_normal(orientation)
            if np.ptp([np.dot(headers[f]["ImagePositionPatient"], normal) for f in part]) > POSITION_TOLERANCE_MM:
                stacks.append(part)
            else:
                h = headers[part[0]]
                pools[(str(h["PatientID"]), str(h["StudyInstanceUID"]), orientation)].extend(part)
    stacks.extend(pools.values())
    volumes = []
    for files in stacks:
        try:
            found, incomplete = _stack_volumes(files, headers)
        except ValueError as error:
            skipped.append(_skip(str(error), files, headers))
            continue
        volumes.extend(found)
        skipped.extend(incomplete)
    volumes.sort(key=lambda v: (v.patient, v.files[0]))
    merged: dict[tuple, Skipped] = {}
    for s in skipped:  # one entry per series and reason (the lone slices of a series of different orientations)
        key = (s.reason, tuple(s.series)) if s.series else (s.reason, tuple(s.files))
        merged.setdefault(key, Skipped(s.reason, [], s.series)).files.extend(s.files)
    skipped = sorted((Skipped(s.reason, sorted(s.files), s.series) for s in merged.values()), key=lambda s: s.files[0])
    for s in skipped:
        logger.warning("DICOM: skipping %s", s)
    return DicomIndex(str(root), volumes, skipped, non_dicom)
