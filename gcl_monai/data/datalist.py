"""Common datalist machinery shared by the dataset readers: path and shape checks, collecting volumes with an
``on_error`` policy, patient ids and meta-label encoding. The readers (:mod:`gcl_monai.data.acdc`, ``prostate``,
``mmwhs``, ``hvsmr``, ``json_datalist``) import this module; :mod:`gcl_monai.data.layouts` dispatches to them.

A *datalist* is a ``list[dict]`` with one dict per 3D volume, ready for :class:`monai.data.Dataset`:

- ``"image"``/``"label"``: file paths as ``str``. HDF5 volumes carry the HDF5 dataset name after
  :data:`H5_KEY_SEPARATOR` (``".../patient001_frame01.h5#image"``). ``"label"`` is absent only for
  unlabelled data.
- ``"patient"``: the original patient id (``str``); ``"patient_id"``: its class index ``0..P-1``
  (by sorted patient string over the returned list).
- ``"dataset"``: the dataset name; ACDC adds ``"organ_state"`` (0 = ED, 1 = ES) and ``"group"``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("gcl_monai.data")

H5_KEY_SEPARATOR = "#"
"""Separates an HDF5 file path from the name of the HDF5 dataset inside it."""

H5_CONFIG_SEPARATOR = "::"
"""What :data:`H5_KEY_SEPARATOR` becomes in a MONAI bundle config (its ``ConfigParser`` rewrites ``#`` as ``::``)."""

H5_SUFFIXES = (".h5", ".hdf5", ".hdf")
"""File suffixes (case-insensitive) of HDF5 volumes."""

META_LABEL_NAMES = ("patient_id", "slice_quantile", "organ_state")
"""Meta labels used throughout the project (Sec. 4.2 of the paper)."""

DERIVED_META_KEYS = ("slice_quantile",)
"""Meta labels computed later by the slicing transform, never stored in a datalist."""

ON_ERROR_CHOICES = ("raise", "skip")
NIFTI_SUFFIXES = (".nii.gz", ".nii")


class DatalistError(ValueError):
    """A volume, file or folder that cannot be listed; the message names the path and the reason."""


# ----------------------------------------------------------------------------------------------
# paths and file checks
# ----------------------------------------------------------------------------------------------
def check_on_error(on_error: str) -> str:
    """Validate an ``on_error`` policy.

    Raises:
        ValueError: when ``on_error`` is not one of :data:`ON_ERROR_CHOICES`.
    """
    if on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}.")
    return on_error


def require_dir(path: str | Path, what: str = "dataset folder") -> Path:
    """Return ``path`` as a :class:`~pathlib.Path` after checking that it is an existing folder.

    Raises:
        FileNotFoundError: when the folder is missing or is not a folder.
    """
    path = Path(path)
    if not path.is_dir():
        state = "is not a folder" if path.exists() else "does not exist"
        raise FileNotFoundError(f"{what} {str(path)!r} {state}.")
    return path


def nifti_stem(name: str) -> str | None:
    """File name without its ``.nii``/``.nii.gz`` suffix (case-insensitive), or None if not NIfTI."""
    lower = name.lower()
    for suffix in NIFTI_SUFFIXES:
        if lower.endswith(suffix) and not name.startswith("."):
            return name[: -len(suffix)]
    return None


def list_nifti(folder: Path) -> dict[str, Path]:
    """Map the lower-cased stem of every (non-hidden) NIfTI file in ``folder`` to its path."""
    files = {}
    for path in sorted(folder.iterdir()):
        stem = nifti_stem(path.name)
        if stem is not None and path.is_file():
            files[stem.lower()] = path
    return files


def h5_path(path: str | Path, key: str) -> str:
    """``"<path>#<key>"``: the datalist string for HDF5 dataset ``key`` in file ``path``."""
    return f"{path}{H5_KEY_SEPARATOR}{key}"


def split_h5_path(path: str | os.PathLike, default_dataset: str | None = None) -> tuple[str, str | None]:
    """
    Split ``"file.h5#dataset"`` into the HDF5 file and the name of the dataset inside it.

    ``"file.h5::dataset"`` is read the same way: MONAI's bundle ``ConfigParser`` rewrites a ``#`` in every string of
    a config as its id separator ``::``. Only a file part ending in one of :data:`H5_SUFFIXES` is split, so a
    ``#`` elsewhere in a NIfTI path is kept.

    Args:
        path: a datalist path, optionally ``<file>#<dataset>``.
        default_dataset: the dataset name returned for an HDF5 path that names none, and for any other path.

    Returns:
        ``(file_path, dataset_name)``, with ``default_dataset`` as the name when ``path`` names no HDF5 dataset.
    """
    text = os.fspath(path)
    for sep in (H5_KEY_SEPARATOR, H5_CONFIG_SEPARATOR):
        base, found, key = text.rpartition(sep)
        if found and base.lower().endswith(H5_SUFFIXES):
            return base, key or default_dataset
    return text, default_dataset


def nifti_shape(path: str | Path) -> tuple[int, ...]:
    """Shape of a NIfTI volume from its header only (no voxel data is read).

    Raises:
        DatalistError: when the file is missing or is not a readable NIfTI file.
    """
    import nibabel as nib

    if not Path(path).is_file():
        raise DatalistError(f"{path}: file not found.")
    try:
        return tuple(int(s) for s in nib.load(str(path)).shape)
    except Exception as exc:  # nibabel raises several types for corrupt files
        raise DatalistError(f"{path}: unreadable NIfTI header ({type(exc).__name__}: {exc}).") from exc


def h5_shapes(path: str | Path, keys: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Shapes of the HDF5 datasets ``keys`` in file ``path`` (no voxel data is read).

    Raises:
        DatalistError: when the file is missing, unreadable, or lacks one of ``keys``.
    """
    try:
        import h5py
    except ImportError as exc:  # optional dependency (extra "h5")
        raise ImportError("Reading HDF5 datasets needs h5py: pip install 'gcl-monai[h5]'.") from exc

    if not Path(path).is_file():
        raise DatalistError(f"{path}: file not found.")
    try:
        with h5py.File(path, "r") as f:
            missing = [k for k in keys if k not in f]
            if missing:
                raise DatalistError(f"{path}: HDF5 dataset(s) {missing} missing (found: {sorted(f.keys())}).")
            return {k: tuple(int(s) for s in f[k].shape) for k in keys}
    except DatalistError:
        raise
    except Exception as exc:
        raise DatalistError(f"{path}: unreadable HDF5 file ({type(exc).__name__}: {exc}).") from exc


def volume_shape(path: str) -> tuple[int, ...]:
    """Shape of a volume given by a datalist path, from headers only.

    Handles NIfTI (nibabel), ``"file.h5#key"`` (h5py) and other formats SimpleITK reads
    (shape in SimpleITK's x, y, z order, like NIfTI).

    Raises:
        DatalistError: when the file is missing or unreadable.
    """
    file, key = split_h5_path(path)
    if key is not None:
        return h5_shapes(file, [key])[key]
    if nifti_stem(Path(file).name) is not None:
        return nifti_shape(file)
    import SimpleITK as sitk

    if not Path(file).exists():
        raise DatalistError(f"{file}: file not found.")
    reader = sitk.ImageFileReader()
    reader.SetFileName(file)
    try:
        reader.ReadImageInformation()
    except RuntimeError as exc:
        raise DatalistError(f"{file}: unreadable image header ({exc}).") from exc
    channels = reader.GetNumberOfComponents()
    return tuple(int(s) for s in reader.GetSize()) + ((channels,) if channels > 1 else ())


def check_same_shape(image: str, image_shape: Sequence[int], label: str, label_shape: Sequence[int]) -> None:
    """Check that a label covers its image voxel for voxel.

    A 4D image (channels last, as in the Medical Segmentation Decathlon) matches a 3D label of its
    first three dimensions.

    Raises:
        DatalistError: on a shape mismatch, naming both files and shapes.
    """
    spatial = tuple(image_shape)[: len(label_shape)] if len(image_shape) == len(label_shape) + 1 else tuple(image_shape)
    if spatial != tuple(label_shape):
        raise DatalistError(
            f"{image}: image shape {tuple(image_shape)} does not match label shape {tuple(label_shape)} of {label}."
        )


def num_slices(item: dict, key: str = "image") -> int:
    """Number of 2D slices of a datalist item's volume, read from the file header.

    Slices run along the first axis of SSL4MIS HDF5 volumes (Z, H, W) and along the third axis of
    NIfTI and other volumes (x, y, z[, channels]).

    Args:
        item: a datalist dict.
        key: the key of the volume path.

    Raises:
        DatalistError: when the file is unreadable or not at least 3D.
    """
    path = item[key]
    shape = volume_shape(path)
    if len(shape) < 3:
        raise DatalistError(f"{path}: expected a 3D volume, got shape {shape}.")
    return shape[0] if split_h5_path(path)[1] is not None else shape[2]


# ----------------------------------------------------------------------------------------------
# collecting volumes, patient ids and meta labels
# ----------------------------------------------------------------------------------------------
def collect_volumes(
    candidates: Iterable[tuple[str, Callable[[], dict]]], on_error: str, dataset: str, root: str | Path
) -> list[dict]:
    """Build the datalist entries of the candidate volumes, then assign patient ids.

    Args:
        candidates: ``(name, build)`` pairs; ``build()`` returns one datalist dict (without
            ``"patient_id"``) or raises :class:`DatalistError` for a bad volume.
        on_error: ``"raise"`` re-raises the first error; ``"skip"`` logs one warning per bad volume
            and a final summary, and drops it.
        dataset: dataset name for messages.
        root: dataset folder for messages.

    Returns:
        The datalist sorted by patient then image path, with ``"patient_id"`` assigned.

    Raises:
        DatalistError: on a bad volume (``on_error="raise"``), or when no usable volume is left.
    """
    check_on_error(on_error)
    items, skipped, total = [], 0, 0
    for name, build in candidates:
        total += 1
        try:
            items.append(build())
        except DatalistError as exc:
            if on_error == "raise":
                raise
            skipped += 1
            logger.warning("%s: skipping %s: %s", dataset, name, exc)
    if skipped:
        logger.warning("%s: kept %d of %d volumes in %s, skipped %d.", dataset, total - skipped, total, root, skipped)
    if not items:
        raise DatalistError(f"{root}: no usable {dataset} volume found ({total} candidate(s), {skipped} skipped).")
    items.sort(key=lambda d: (d["patient"], str(d["image"])))
    return assign_patient_ids(items)


def assign_patient_ids(datalist: list[dict]) -> list[dict]:
    """Set ``"patient_id"`` (int, ``0..P-1`` by sorted ``"patient"`` string) in place; return the list."""
    index = {p: i for i, p in enumerate(sorted({str(d["patient"]) for d in datalist}))}
    for d in datalist:
        d["patient"] = str(d["patient"])
        d["patient_id"] = index[d["patient"]]
    return datalist


def _available_fields(datalist: list[dict]) -> list[str]:
    return sorted({k for d in datalist for k in d} | set(DERIVED_META_KEYS))


def validate_meta_keys(datalist: list[dict], meta_keys: Sequence[str] | None) -> None:
    """Check that every requested meta label is present in every entry (or derived later).

    Raises:
        ValueError: naming the unknown meta label and the available fields.
    """
    for key in meta_keys or ():
        if key in DERIVED_META_KEYS:
            continue
        missing = [d for d in datalist if key not in d]
        if len(missing) == len(datalist):
            raise ValueError(
                f"Unknown meta label {key!r}: not in the datalist entries. "
                f"Available fields: {_available_fields(datalist)}."
            )
        if missing:
            raise ValueError(
                f"Meta label {key!r} is missing in {len(missing)} of {len(datalist)} entries "
                f"(first: {missing[0].get('image')})."
            )


def _sorted_values(values: Iterable[Any]) -> list[Any]:
    values = set(values)
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sorted(values)
    return sorted(values, key=str)


def encode_meta_labels(datalist: list[dict], meta_keys: Sequence[str]) -> dict[str, list[str]]:
    """Integer-encode meta labels in place: sorted unique values become ``0..C-1``.

    The original value is kept as a string under ``"<key>_name"``. ``"patient_id"`` is encoded
    from ``"patient"`` (see :func:`assign_patient_ids`) and derived keys (``"slice_quantile"``) are
    left to the slicing transform.

    Args:
        datalist: datalist entries, modified in place.
        meta_keys: the meta labels to encode.

    Returns:
        For each encoded key, the class names in class-index order.

    Raises:
        ValueError: for an unknown meta label or a value that is not a scalar.
    """
    validate_meta_keys(datalist, meta_keys)
    mapping = {}
    for key in meta_keys:
        if key in DERIVED_META_KEYS:
            continue
        if key == "patient_id":
            assign_patient_ids(datalist)
            mapping[key] = sorted({d["patient"] for d in datalist})
            continue
        bad = [d[key] for d in datalist if not isinstance(d[key], (str, int, float, bool))]
        if bad:
            raise ValueError(f"Meta label {key!r} must hold scalars (str/int/float), got {bad[0]!r}.")
        classes = _sorted_values(d[key] for d in datalist)
        index = {v: i for i, v in enumerate(classes)}
        for d in datalist:
            d[f"{key}_name"] = str(d[key])
            d[key] = index[d[key]]
        mapping[key] = [str(v) for v in classes]
    return mapping


def meta_num_classes(datalist: list[dict], key: str) -> int:
    """Number of classes ``C_m`` of an integer-encoded meta label (``max + 1``).

    Raises:
        ValueError: when the meta label is absent from the datalist.
    """
    validate_meta_keys(datalist, [key])
    return max(int(d[key]) for d in datalist) + 1
