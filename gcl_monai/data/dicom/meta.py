"""Meta labels of a DICOM volume read from its headers: the patient (optionally hashed), the cardiac phase from the
trigger time within the RR interval, the end-diastolic frame, and any DICOM keyword as a further label. The slice
position label (``slice_quantile``) is derived later from the volume's slice order, which is the order along the
slice normal (see :mod:`gcl_monai.data.dicom.index`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from gcl_monai.data.datalist import DERIVED_META_KEYS
from gcl_monai.data.dicom.index import DicomVolume

__all__ = ["BUILTIN_META_LABELS", "cardiac_phase", "check_meta_keys", "hash_patient", "rr_interval", "volume_meta"]

BUILTIN_META_LABELS = ("patient_id", "cardiac_phase", "end_diastole", *DERIVED_META_KEYS)
"""Meta labels the DICOM reader computes; any other meta label must be a DICOM keyword."""


def hash_patient(patient_id: str, salt: str = "") -> str:
    """A pseudonym of a PatientID: the first 16 hex digits of ``sha256(salt + patient_id)``."""
    return hashlib.sha256((salt + patient_id).encode()).hexdigest()[:16]


def check_meta_keys(meta_keys: Sequence[str]) -> list[str]:
    """The DICOM keywords among ``meta_keys`` (the others are built-in labels).

    Raises:
        ValueError: naming a meta label that is neither built in nor a DICOM keyword.
    """
    from pydicom.datadict import tag_for_keyword

    keywords = [k for k in meta_keys if k not in BUILTIN_META_LABELS]
    unknown = [k for k in keywords if tag_for_keyword(k) is None]
    if unknown:
        raise ValueError(
            f"Unknown meta label(s) {unknown}: neither one of {list(BUILTIN_META_LABELS)} nor a DICOM "
            "keyword (e.g. Manufacturer, MagneticFieldStrength, InstitutionName, SeriesDescription)."
        )
    return keywords


def _series(volume: DicomVolume) -> str:
    return ", ".join(volume.series)


def rr_interval(volume: DicomVolume) -> float:
    """The RR interval of a cine volume (ms): NominalInterval (0018,1062) of its first slice; where it is missing or
    zero, the fallback is the stack's last trigger time extended by one frame, ``t_last * N / (N - 1)`` with N the
    CardiacNumberOfImages (0018,1090), or else the number of phases found.

    Raises:
        ValueError: naming the series when the volume has no TriggerTime, or when neither NominalInterval nor two
            phases are available.
    """
    if volume.trigger_time is None:
        raise ValueError(f"TriggerTime (0018,1060) missing in series {_series(volume)}: no cardiac phase.")
    nominal = volume.headers[0].get("NominalInterval")
    if nominal:
        return float(nominal)
    frames = volume.headers[0].get("CardiacNumberOfImages") or len(volume.stack_trigger_times)
    last = max(volume.stack_trigger_times)
    if frames < 2 or last <= 0:
        raise ValueError(
            f"NominalInterval (0018,1062) missing in series {_series(volume)} and a single cardiac phase: "
            "the RR interval is unknown."
        )
    return last * frames / (frames - 1)


def cardiac_phase(trigger_time: float, rr: float, bins: int) -> int:
    """The cardiac phase bin ``floor(bins * t / RR)`` of trigger time ``t`` in ``0..bins-1`` (a trigger time at or
    beyond the RR interval falls in the last bin)."""
    if bins < 1:
        raise ValueError(f"phase_bins must be >= 1, got {bins}.")
    return min(bins - 1, max(0, int(bins * trigger_time / rr)))


def volume_meta(
    volume: DicomVolume,
    meta_keys: Sequence[str] = (),
    phase_bins: int = 4,
    hash_patient_id: bool = False,
    salt: str = "",
) -> dict[str, Any]:
    """The datalist fields of a volume (without ``image`` and the integer ``patient_id``).

    Args:
        volume: the indexed volume.
        meta_keys: the meta labels wanted: ``cardiac_phase``/``end_diastole`` are computed when asked for, DICOM
            keywords are copied from the first slice.
        phase_bins: number of cardiac phase bins over the RR interval.
        hash_patient_id: replace the PatientID by :func:`hash_patient` (and leave out the series UIDs).
        salt: salt of the hash (keep it secret to keep the pseudonyms unlinkable).

    Returns:
        ``patient``, ``dataset="dicom"``, ``num_slices``, ``trigger_time`` (ms, for a cine), ``series`` (its
        SeriesInstanceUIDs joined by ``", "``, unless hashed); when either is asked for, ``cardiac_phase`` (bin)
        and ``end_diastole`` (1 for the earliest phase of the stack, the frame at the R wave in ECG-triggered cine,
        else 0); each requested DICOM keyword.

    Raises:
        ValueError: naming the tag and the series when a requested label cannot be read (see :func:`rr_interval`; a
            keyword absent from the header).
    """
    patient = volume.patient
    item: dict[str, Any] = {
        "patient": hash_patient(patient, salt) if hash_patient_id else patient,
        "dataset": "dicom",
        "num_slices": len(volume.files),
    }
    if volume.trigger_time is not None:  # every value is a scalar or a string: the slices' batches collate them
        item["trigger_time"] = volume.trigger_time
    if not hash_patient_id:
        item["series"] = ", ".join(volume.series)
    if {"cardiac_phase", "end_diastole"} & set(meta_keys):
        rr = rr_interval(volume)
        item["cardiac_phase"] = cardiac_phase(volume.trigger_time, rr, phase_bins)
        item["end_diastole"] = int(volume.phase == 0)
    for keyword in check_meta_keys(meta_keys):
        value = volume.headers[0].get(keyword)
        if value is None or value == "":
            raise ValueError(f"{keyword} missing in series {_series(volume)} (first file {volume.files[0]}).")
        item[keyword] = value if isinstance(value, (str, int, float)) else str(value)
    return item
