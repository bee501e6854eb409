"""DICOM archives: the index of a folder tree into 3D volumes, meta labels from the headers, the one-time conversion to
NIfTI, the datalist command (``python -m gcl_monai.data.dicom DIR --output datalist.json``), the inference cases of a
DICOM folder, and the phantom written as DICOM. pydicom is needed (``pip install 'gcl-monai[dicom]'``)."""

from gcl_monai.data.dicom.convert import convert_volume
from gcl_monai.data.dicom.index import DicomIndex, DicomVolume, Skipped, index_dicom, slice_normal
from gcl_monai.data.dicom.meta import BUILTIN_META_LABELS, cardiac_phase, hash_patient, rr_interval, volume_meta
from gcl_monai.data.dicom.phantom_dicom import DICOM_PHANTOM_LAYOUTS, write_phantom_dicom
from gcl_monai.data.dicom.reader import DICOM_LAYOUTS, default_cache_dir, detect_dicom_layout, read_dicom

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
