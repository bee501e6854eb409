"""DICOM archives: the index of a folder tree into 3D volumes, meta labels from the headers, the one-time conversion to
NIfTI, the datalist command (``python -m gcl_monai.data.dicom DIR --output datalist.json``), the inference cases of a
DICOM folder, and the phantom written as DICOM. pydicom is needed (``pip install 'gcl-monai[dicom]'``)."""

import importlib

from gcl_monai.data.dicom.convert import convert_volume
from gcl_monai.data.dicom.index import DicomIndex, DicomVolume, Skipped, index_dicom, slice_normal
from gcl_monai.data.dicom.meta import BUILTIN_META_LABELS, cardiac_phase, hash_patient, rr_interval, volume_meta
from gcl_monai.data.dicom.reader import DICOM_LAYOUTS, default_cache_dir, detect_dicom_layout, read_dicom

# imported on first use, so that `python -m gcl_monai.data.dicom.phantom_dicom` runs it only once
_LAZY_EXPORTS = {"DICOM_PHANTOM_LAYOUTS": "phantom_dicom", "write_phantom_dicom": "phantom_dicom"}


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        return getattr(importlib.import_module(f"gcl_monai.data.dicom.{_LAZY_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))


__all__ = [
    "BUILTIN_META_LABELS",
    "DICOM_LAYOUTS",
    "DICOM_PHANTOM_LAYOUTS",
    "DicomIndex",
    "DicomVolume",
    "Skipped",
    "cardiac_phase",
    "convert_volume",
    "default_cache_dir",
    "detect_dicom_layout",
    "hash_patient",
    "index_dicom",
    "read_dicom",
    "rr_interval",
    "slice_normal",
    "volume_meta",
    "write_phantom_dicom",
]
