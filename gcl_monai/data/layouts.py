"""Dataset layouts: :func:`detect_layout` recognises a dataset folder from its file names and :func:`load_datalist`
dispatches to the dataset's reader. The readers know nothing of this module (no import circle)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from gcl_monai.data import acdc, hvsmr, mmwhs, prostate  # the readers; none of them imports this module
from gcl_monai.data.datalist import DatalistError, validate_meta_keys
from gcl_monai.data.dicom.reader import DICOM_LAYOUTS, detect_dicom_layout, read_dicom
from gcl_monai.data.json_datalist import JSON_LAYOUTS, detect_json_layout, read_json_datalist

__all__ = ["READERS", "DatasetReader", "detect_layout", "load_datalist"]

logger = logging.getLogger("gcl_monai.data")


class DatasetReader(NamedTuple):
    """How to recognise and read one dataset."""

    detect: Callable[[Path], str | None]
    """``detect(root)``: the layout name, or None when ``root`` is not this dataset."""
    read: Callable[..., list[dict]]
    """``read(root, **kwargs)``: the datalist."""
    layouts: dict[str, str]
    """layout name -> the file pattern it expects (for error messages)."""


#: dataset name -> its reader, tried in this order by ``dataset="auto"`` (DICOM first: an archive's folders may carry
#: any names, ``patientXXX`` included, while no other layout holds DICOM files).
READERS: dict[str, DatasetReader] = {
    "dicom": DatasetReader(detect_dicom_layout, read_dicom, DICOM_LAYOUTS),
    "acdc": DatasetReader(acdc.detect_acdc_layout, acdc.read_acdc, acdc.ACDC_LAYOUTS),
    "prostate": DatasetReader(prostate.detect_prostate_layout, prostate.read_prostate, prostate.PROSTATE_LAYOUTS),
    "mmwhs": DatasetReader(mmwhs.detect_mmwhs_layout, mmwhs.read_mmwhs, mmwhs.MMWHS_LAYOUTS),
    "hvsmr": DatasetReader(hvsmr.detect_hvsmr_layout, hvsmr.read_hvsmr, hvsmr.HVSMR_LAYOUTS),
    "json": DatasetReader(detect_json_layout, read_json_datalist, JSON_LAYOUTS),
}

#: readers that take ``meta_keys`` themselves (they encode or compute the labels), the others are checked after.
_READS_META_KEYS = ("json", "dicom")


def _expected_layouts(datasets: Iterable[str]) -> str:
    lines = [
        f"  - {name} ({layout}): {pattern}" for name in datasets for layout, pattern in READERS[name].layouts.items()
    ]
    return "\n".join(lines)


def detect_layout(root: str | Path, dataset: str = "auto") -> tuple[str, str]:
    """Detect a dataset layout from folder contents (file names; for DICOM, the 132-byte preamble of a few files).

    Args:
        root: dataset folder (or a JSON datalist file).
        dataset: ``"auto"`` tries every known dataset; otherwise only that one.

    Returns:
        ``(dataset, layout)``, e.g. ``("acdc", "h5")``.

    Raises:
        ValueError: for an unknown ``dataset`` name.
        FileNotFoundError: when ``root`` does not exist.
        DatalistError: when the contents match no known layout; the message lists the expected ones.
    """
    if dataset != "auto" and dataset not in READERS:
        raise ValueError(f"Unknown dataset {dataset!r}; choose 'auto' or one of {sorted(READERS)}.")
    names = list(READERS) if dataset == "auto" else [dataset]
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(
            f"Dataset folder {str(root)!r} does not exist. Expected layouts:\n{_expected_layouts(names)}"
        )
    for name in names:
        if root.is_dir() or name == "json":
            layout = READERS[name].detect(root)
            if layout is not None:
                return name, layout
    raise DatalistError(
        f"{str(root)!r} matches no known {'dataset' if dataset == 'auto' else dataset} layout. "
        f"Expected layouts:\n{_expected_layouts(names)}"
    )


def load_datalist(
    root: str | Path, dataset: str = "auto", meta_keys: Sequence[str] | None = None, **kwargs: Any
) -> list[dict]:
    """Read a dataset folder into a datalist, detecting its layout.

    Args:
        root: dataset folder, or a JSON datalist file.
        dataset: ``"auto"``, ``"acdc"``, ``"prostate"``, ``"mmwhs"``, ``"hvsmr"``, ``"json"`` or ``"dicom"``.
        meta_keys: meta labels the caller will use; checked to exist (``"slice_quantile"`` is
            derived later), integer-encoded for JSON datalists, read from the headers for DICOM.
        kwargs: passed to the reader (e.g. ``on_error="skip"``, ACDC ``section="testing"``).

    Returns:
        The datalist (see :mod:`gcl_monai.data.datalist` for its keys).

    Raises:
        FileNotFoundError: when ``root`` does not exist (message lists the expected layouts).
        DatalistError: when no layout matches, or for bad volumes (see each reader).
        ValueError: for an unknown dataset name or meta label.
    """
    name, layout = detect_layout(root, dataset)
    logger.info("Reading %s (%s layout) from %s.", name, layout, root)
    read = READERS[name].read
    if name in _READS_META_KEYS:
        return read(root, meta_keys=meta_keys, **kwargs)
    datalist = read(root, **kwargs)
    validate_meta_keys(datalist, meta_keys)
    return datalist
