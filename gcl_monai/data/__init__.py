"""Dataset readers (MONAI datalists; DICOM archives in :mod:`gcl_monai.data.dicom`), patient-level splits and the
synthetic cardiac phantom."""

import importlib

from gcl_monai.data.acdc import ACDC_GROUPS, ACDC_LABEL_NAMES, read_acdc, read_acdc_h5, read_acdc_official
from gcl_monai.data.datalist import (
    DERIVED_META_KEYS,
    H5_CONFIG_SEPARATOR,
    H5_KEY_SEPARATOR,
    H5_SUFFIXES,
    META_LABEL_NAMES,
    DatalistError,
    assign_patient_ids,
    encode_meta_labels,
    h5_path,
    meta_num_classes,
    num_slices,
    split_h5_path,
    validate_meta_keys,
)
from gcl_monai.data.dicom import read_dicom
from gcl_monai.data.hvsmr import HVSMR_LABEL_NAMES, read_hvsmr
from gcl_monai.data.inference_datalist import inference_datalist
from gcl_monai.data.json_datalist import read_json_datalist
from gcl_monai.data.layouts import detect_layout, load_datalist
from gcl_monai.data.mmwhs import MMWHS_LABEL_NAMES, MMWHS_LABEL_VALUES, read_mmwhs
from gcl_monai.data.prostate import PROSTATE_LABEL_NAMES, peripheral_zone_label, read_prostate
from gcl_monai.data.splits import (
    LABELED_POOLS,
    labeled_pool,
    labeled_subset,
    load_split,
    save_split,
    split_patients,
    unlabeled_subset,
    without_labels,
)

# imported on first use: the phantom (so `python -m gcl_monai.data.phantom` runs it only once) and the slice
# dataset, its device batches and its sampler (torch-heavy)
_LAZY_EXPORTS = {
    "generate_acdc_phantom": "phantom",
    "synthesize_patient": "phantom",
    "SliceDataset": "slice_dataset",
    "SliceRecord": "slice_dataset",
    "DeviceSliceBatches": "device_batches",
    "GroupedSampler": "samplers",
}


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        return getattr(importlib.import_module(f"gcl_monai.data.{_LAZY_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))


__all__ = [
    "ACDC_GROUPS",
    "ACDC_LABEL_NAMES",
    "DERIVED_META_KEYS",
    "H5_CONFIG_SEPARATOR",
    "H5_KEY_SEPARATOR",
    "H5_SUFFIXES",
    "HVSMR_LABEL_NAMES",
    "META_LABEL_NAMES",
    "MMWHS_LABEL_NAMES",
    "MMWHS_LABEL_VALUES",
    "PROSTATE_LABEL_NAMES",
    "LABELED_POOLS",
    "DatalistError",
    "DeviceSliceBatches",
    "GroupedSampler",
    "SliceDataset",
    "SliceRecord",
    "assign_patient_ids",
    "detect_layout",
    "encode_meta_labels",
    "generate_acdc_phantom",
    "h5_path",
    "inference_datalist",
    "labeled_pool",
    "labeled_subset",
    "load_datalist",
    "load_split",
    "meta_num_classes",
    "num_slices",
    "peripheral_zone_label",
    "read_acdc",
    "read_acdc_h5",
    "read_acdc_official",
    "read_dicom",
    "read_hvsmr",
    "read_json_datalist",
    "read_mmwhs",
    "read_prostate",
    "save_split",
    "split_h5_path",
    "split_patients",
    "synthesize_patient",
    "unlabeled_subset",
    "validate_meta_keys",
    "without_labels",
]
