"""The DICOM archive as a datalist (one entry per 3D volume: the converted NIfTI and the meta labels from the headers),
the reader that :mod:`gcl_monai.data.layouts` dispatches to for ``dataset="dicom"``."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from gcl_monai.data.datalist import DatalistError, collect_volumes, encode_meta_labels, require_dir
from gcl_monai.data.dicom.convert import convert_volume
from gcl_monai.data.dicom.index import DicomIndex, index_dicom
from gcl_monai.data.dicom.meta import check_meta_keys, volume_meta

logger = logging.getLogger("gcl_monai.data")

__all__ = ["DICOM_LAYOUTS", "default_cache_dir", "detect_dicom_layout", "read_dicom"]

DICOM_LAYOUTS = {"dicom": "any folder tree of DICOM files (pydicom reads the headers; other files are skipped)"}

_PROBE_FILES = 64  # files opened at most by the layout detection


def detect_dicom_layout(root: Path) -> str | None:
    """``"dicom"`` when one of the first files under ``root`` carries the DICOM preamble (``DICM`` at byte 128)."""
    if not root.is_dir():
        return None
    seen = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    if f.read(132)[128:] == b"DICM":
                        return "dicom"
            except OSError:
                pass
            seen += 1
            if seen >= _PROBE_FILES:
                return None
    return None


def default_cache_dir(root: str | Path) -> Path:
    """``$GCL_DICOM_CACHE/<hash of the archive path>``, by default under ``~/.cache/gcl_monai/dicom`` (an archive is
    often read-only, so nothing is written next to it)."""
    base = Path(os.environ.get("GCL_DICOM_CACHE", Path.home() / ".cache" / "gcl_monai" / "dicom"))
    return base / hashlib.sha1(str(Path(root).resolve()).encode()).hexdigest()[:16]


def read_dicom(
    root: str | Path,
    meta_keys: Sequence[str] | None = ("patient_id",),
    cache_dir: str | Path | None = None,
    phase_bins: int = 4,
    hash_patient_id: bool = False,
    salt: str = "",
    on_error: str = "skip",
    index: DicomIndex | None = None,
    skipped: list[dict] | None = None,
) -> list[dict]:
    """Read a DICOM archive into a datalist, converting each volume to NIfTI once.

    The archive is indexed (:func:`~gcl_monai.data.dicom.index.index_dicom`, headers cached in
    ``<cache_dir>/headers.json``), each volume converted to ``<cache_dir>/volumes/<volume_id>.nii.gz``
    (:func:`~gcl_monai.data.dicom.convert.convert_volume`) and given its meta labels
    (:func:`~gcl_monai.data.dicom.meta.volume_meta`). DICOM keywords among ``meta_keys`` are integer-encoded
    (the value kept under ``"<keyword>_name"``) like the meta labels of a JSON datalist.

    Args:
        root: the archive folder.
        meta_keys: the meta labels the entries must carry: ``patient_id``, ``cardiac_phase``, ``end_diastole``,
            ``slice_quantile`` (derived later) or DICOM keywords.
        cache_dir: where the header cache and the NIfTI volumes go (default :func:`default_cache_dir`).
        phase_bins: number of cardiac phase bins over the RR interval.
        hash_patient_id: pseudonymise the PatientID (see :func:`~gcl_monai.data.dicom.meta.hash_patient`).
        salt: salt of that hash.
        on_error: ``"skip"`` (default) or ``"raise"`` at a volume whose labels or pixels cannot be read; the stacks the
            index rejects are always skipped and logged.
        index: an index already built (its volumes are used as they are).
        skipped: when given, a ``{"reason", "series", "files"}`` dict is appended for each volume left out here
            (labels or pixels unreadable), after the index's own skips.

    Returns:
        One entry per volume: ``image`` (NIfTI), ``patient``, ``patient_id``, ``dataset="dicom"``, ``num_slices``,
        ``trigger_time`` (cine), ``series`` (unless hashed), the cardiac labels and the DICOM keyword labels.

    Raises:
        FileNotFoundError: when ``root`` is not a folder.
        DatalistError: when no volume is usable (with ``on_error="raise"``: at the first bad volume).
        ValueError: for a meta label that is neither built in nor a DICOM keyword.
    """
    root = require_dir(root, "DICOM folder")
    meta_keys = list(meta_keys or ())
    keywords = check_meta_keys(meta_keys)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir(root)
    if index is None:
        index = index_dicom(root, keywords, cache / "headers.json")
    if not index.volumes:
        reasons = "; ".join(str(s) for s in index.skipped[:3])
        raise DatalistError(
            f"{root}: no 3D volume found in {len(index.non_dicom)} non-DICOM and "
            f"{sum(len(s.files) for s in index.skipped)} skipped DICOM file(s). {reasons}"
        )

    if skipped is not None:
        skipped.extend({"reason": s.reason, "series": s.series, "files": s.files} for s in index.skipped)

    def build(volume) -> dict:
        try:
            item = volume_meta(volume, meta_keys, phase_bins, hash_patient_id, salt)
            return {"image": convert_volume(volume, cache / "volumes"), **item}
        except (ValueError, DatalistError) as error:  # DatalistError is a ValueError
            if skipped is not None:
                skipped.append({"reason": str(error), "series": volume.series, "files": volume.files})
            raise DatalistError(str(error)) from error

    candidates = [(f"series {', '.join(v.series)} ({v.files[0]})", lambda v=v: build(v)) for v in index.volumes]
    datalist = collect_volumes(candidates, on_error, "dicom", root)
    if keywords:
        encode_meta_labels(datalist, keywords)
    logger.info(
        "DICOM: %d volume(s) of %d patient(s) from %s (cache %s).",
        len(datalist),
        len({d["patient"] for d in datalist}),
        root,
        cache,
    )
    return datalist
