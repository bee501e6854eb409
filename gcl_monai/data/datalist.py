"""Common datalist machinery: validation helpers, meta-label encoding, the generic JSON reader and
:func:`load_datalist`, which detects a dataset's layout and dispatches to its reader.

A *datalist* is a ``list[dict]`` with one dict per 3D volume, ready for :class:`monai.data.Dataset`:

- ``"image"``/``"label"``: file paths as ``str``. HDF5 volumes carry the HDF5 dataset name after
  :data:`H5_KEY_SEPARATOR` (``".../patient001_frame01.h5#image"``). ``"label"`` is absent only for
  unlabelled data.
- ``"patient"``: the original patient id (``str``); ``"patient_id"``: its class index ``0..P-1``
  (by sorted patient string over the returned list).
- ``"dataset"``: the dataset name; ACDC adds ``"organ_state"`` (0 = ED, 1 = ES) and ``"group"``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("gcl_monai.data")

H5_KEY_SEPARATOR = "#"
"""Separates an HDF5 file path from the name of the HDF5 dataset inside it."""

META_LABEL_NAMES = ("patient_id", "slice_quantile", "organ_state")
"""Meta labels used throughout the project (Sec. 4.2 of the paper)."""

DERIVED_META_KEYS = ("slice_quantile",)
"""Meta labels computed later by the slicing transform, never stored in a datalist."""

ON_ERROR_CHOICES = ("raise", "skip")
NIFTI_SUFFIXES = (".nii.gz", ".nii")
JSON_DATALIST_NAMES = ("dataset.json", "datalist.json")
JSON_LAYOUTS = {"json": "<root>.json or <root>/dataset.json: {'training': [{'image': ..., 'label': ...}, ...]}"}


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


def split_h5_path(path: str) -> tuple[str, str | None]:
    """Split ``"file.h5#key"`` into ``("file.h5", "key")``; other paths give ``(path, None)``."""
    base, sep, key = str(path).rpartition(H5_KEY_SEPARATOR)
    if sep and base.lower().endswith((".h5", ".hdf5")):
        return base, key
    return str(path), None


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
                raise DatalistError(
                    f"{path}: HDF5 dataset(s) {missing} missing (found: {sorted(f.keys())})."
                )
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


# ----------------------------------------------------------------------------------------------
# generic decathlon-style JSON datalists
# ----------------------------------------------------------------------------------------------
def _resolve(value: Any, base: Path) -> Any:
    if isinstance(value, (list, tuple)):
        return [_resolve(v, base) for v in value]
    file, key = split_h5_path(str(value))
    path = Path(file).expanduser()
    path = path if path.is_absolute() else (base / path)
    return h5_path(path, key) if key is not None else str(path)


def _check_path_exists(value: Any, entry_name: str) -> None:
    for v in value if isinstance(value, list) else [value]:
        file = split_h5_path(v)[0]
        if not Path(file).exists():
            raise DatalistError(f"{file}: file not found (referenced by {entry_name}).")


def _json_item(raw: Any, base: Path, dataset: str, where: str, check_files: bool) -> dict:
    if isinstance(raw, str):
        raw = {"image": raw}
    if not isinstance(raw, dict) or "image" not in raw:
        raise DatalistError(f"{where}: expected a dict with an 'image' path, got {raw!r}.")
    item = dict(raw)
    for key in ("image", "label"):
        if key in item:
            item[key] = _resolve(item[key], base)
    if "patient" not in item:
        if "patient_id" in item:
            item["patient"] = str(item["patient_id"])
        else:
            first = item["image"][0] if isinstance(item["image"], list) else item["image"]
            name = Path(split_h5_path(first)[0]).name
            item["patient"] = nifti_stem(name) or name.split(".")[0]
    item.setdefault("dataset", dataset)
    if check_files:
        for key in ("image", "label"):
            if key in item:
                _check_path_exists(item[key], where)
        if isinstance(item["image"], str) and isinstance(item.get("label"), str):
            check_same_shape(item["image"], volume_shape(item["image"]), item["label"], volume_shape(item["label"]))
    return item


def read_json_datalist(
    path: str | Path,
    section: str = "training",
    base_dir: str | Path | None = None,
    meta_keys: Sequence[str] | None = None,
    check_files: bool = True,
    on_error: str = "raise",
) -> list[dict]:
    """Read a decathlon-style JSON datalist ``{"training": [{"image": ..., "label": ..., ...}]}``.

    Every extra field of an entry is kept. Relative paths are resolved against ``base_dir`` (default:
    the JSON file's folder); HDF5 paths may carry ``"#key"``. The patient string is the entry's
    ``"patient"``, else its ``"patient_id"``, else the image file name without suffix (then every
    volume is its own patient); ``"patient_id"`` becomes its class index. ``"dataset"`` defaults to
    the JSON's lower-cased ``"name"`` (or the file stem).

    Args:
        path: the JSON file, or a folder holding ``dataset.json`` or ``datalist.json``.
        section: the list to read (``"training"``, ``"validation"``, ``"test"``...).
        base_dir: folder for relative paths.
        meta_keys: meta labels to integer-encode (see :func:`encode_meta_labels`); the class names
            are kept under ``"<key>_name"``.
        check_files: check that the files exist and that image and label shapes match (headers only).
        on_error: ``"raise"`` or ``"skip"`` bad entries (logged).

    Returns:
        The datalist.

    Raises:
        FileNotFoundError: when the JSON file is missing.
        DatalistError: for a malformed JSON or a bad entry (missing file, unreadable volume,
            shape mismatch) with ``on_error="raise"``.
        ValueError: for an unknown meta label.
    """
    path = Path(path)
    if path.is_dir():
        found = [path / n for n in JSON_DATALIST_NAMES if (path / n).is_file()]
        if not found:
            raise FileNotFoundError(f"No {' or '.join(JSON_DATALIST_NAMES)} in folder {str(path)!r}.")
        path = found[0]
    if not path.is_file():
        raise FileNotFoundError(f"JSON datalist {str(path)!r} does not exist.")
    try:
        content = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatalistError(f"{path}: malformed JSON ({exc}).") from exc
    if not isinstance(content, dict) or not isinstance(content.get(section), list):
        keys = sorted(content) if isinstance(content, dict) else type(content).__name__
        raise DatalistError(f"{path}: expected a list under {section!r}, found keys {keys}.")
    dataset = str(content.get("name", path.stem)).lower()
    base = Path(base_dir) if base_dir is not None else path.parent
    names = [f"{path}[{section}][{i}]" for i in range(len(content[section]))]
    candidates = [
        (name, lambda raw=raw, name=name: _json_item(raw, base, dataset, name, check_files))
        for name, raw in zip(names, content[section])
    ]
    datalist = collect_volumes(candidates, on_error, dataset, path)
    if meta_keys:
        encode_meta_labels(datalist, meta_keys)
    return datalist


# ----------------------------------------------------------------------------------------------
# layout detection and dispatch
# ----------------------------------------------------------------------------------------------
def _registry() -> dict[str, tuple[Callable, Callable, dict[str, str]]]:
    """``dataset -> (detect(root) -> layout | None, read(root, **kwargs), layouts)``; imported lazily
    because the reader modules import this one."""
    from gcl_monai.data import acdc, hvsmr, mmwhs, prostate

    return {
        "acdc": (acdc.detect_acdc_layout, acdc.read_acdc, acdc.ACDC_LAYOUTS),
        "prostate": (prostate.detect_prostate_layout, prostate.read_prostate, prostate.PROSTATE_LAYOUTS),
        "mmwhs": (mmwhs.detect_mmwhs_layout, mmwhs.read_mmwhs, mmwhs.MMWHS_LAYOUTS),
        "hvsmr": (hvsmr.detect_hvsmr_layout, hvsmr.read_hvsmr, hvsmr.HVSMR_LAYOUTS),
        "json": (_detect_json_layout, read_json_datalist, JSON_LAYOUTS),
    }


def _detect_json_layout(root: Path) -> str | None:
    if root.is_file():
        return "json" if root.suffix.lower() == ".json" else None
    return "json" if any((root / n).is_file() for n in JSON_DATALIST_NAMES) else None


def _expected_layouts(datasets: Iterable[str]) -> str:
    registry = _registry()
    lines = [f"  - {name} ({layout}): {pattern}" for name in datasets for layout, pattern in registry[name][2].items()]
    return "\n".join(lines)


def detect_layout(root: str | Path, dataset: str = "auto") -> tuple[str, str]:
    """Detect a dataset layout from folder contents (file names only, nothing is opened).

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
    registry = _registry()
    if dataset != "auto" and dataset not in registry:
        raise ValueError(f"Unknown dataset {dataset!r}; choose 'auto' or one of {sorted(registry)}.")
    names = list(registry) if dataset == "auto" else [dataset]
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(
            f"Dataset folder {str(root)!r} does not exist. Expected layouts:\n{_expected_layouts(names)}"
        )
    for name in names:
        if root.is_dir() or name == "json":
            layout = registry[name][0](root)
            if layout is not None:
                return name, layout
    raise DatalistError(f"{str(root)!r} matches no known {'dataset' if dataset == 'auto' else dataset} layout. "
                        f"Expected layouts:\n{_expected_layouts(names)}")


def load_datalist(
    root: str | Path, dataset: str = "auto", meta_keys: Sequence[str] | None = None, **kwargs: Any
) -> list[dict]:
    """Read a dataset folder into a datalist, detecting its layout.

    Args:
        root: dataset folder, or a JSON datalist file.
        dataset: ``"auto"``, ``"acdc"``, ``"prostate"``, ``"mmwhs"``, ``"hvsmr"`` or ``"json"``.
        meta_keys: meta labels the caller will use; checked to exist (``"slice_quantile"`` is
            derived later), and integer-encoded for JSON datalists.
        kwargs: passed to the reader (e.g. ``on_error="skip"``, ACDC ``section="testing"``).

    Returns:
        The datalist (see the module docstring for its keys).

    Raises:
        FileNotFoundError: when ``root`` does not exist (message lists the expected layouts).
        DatalistError: when no layout matches, or for bad volumes (see each reader).
        ValueError: for an unknown dataset name or meta label.
    """
    name, layout = detect_layout(root, dataset)
    logger.info("Reading %s (%s layout) from %s.", name, layout, root)
    read = _registry()[name][1]
    if name == "json":
        return read(root, meta_keys=meta_keys, **kwargs)
    datalist = read(root, **kwargs)
    validate_meta_keys(datalist, meta_keys)
    return datalist
