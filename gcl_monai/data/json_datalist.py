"""Decathlon-style JSON datalists (``{"training": [{"image": ..., "label": ...}, ...]}``), read with MONAI's
:func:`monai.data.load_decathlon_datalist` and completed with the project's keys (patient, dataset, meta labels)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monai.data import load_decathlon_datalist

from gcl_monai.data.datalist import (
    DatalistError,
    check_same_shape,
    collect_volumes,
    encode_meta_labels,
    nifti_stem,
    split_h5_path,
    volume_shape,
)

__all__ = ["JSON_DATALIST_NAMES", "JSON_LAYOUTS", "detect_json_layout", "read_json_datalist"]

JSON_DATALIST_NAMES = ("dataset.json", "datalist.json")
JSON_LAYOUTS = {"json": "<root>.json or <root>/dataset.json: {'training': [{'image': ..., 'label': ...}, ...]}"}


def detect_json_layout(root: Path) -> str | None:
    """``"json"`` for a ``.json`` file or a folder holding ``dataset.json``/``datalist.json``, else None."""
    if root.is_file():
        return "json" if root.suffix.lower() == ".json" else None
    return "json" if any((root / n).is_file() for n in JSON_DATALIST_NAMES) else None


def _check_path_exists(value: Any, entry_name: str) -> None:
    for v in value if isinstance(value, list) else [value]:
        file = split_h5_path(v)[0]
        if not Path(file).exists():
            raise DatalistError(f"{file}: file not found (referenced by {entry_name}).")


def _complete_item(raw: Any, dataset: str, where: str, check_files: bool) -> dict:
    """An entry of MONAI's datalist (paths already resolved) with ``"patient"`` and ``"dataset"``, its files
    checked."""
    if not isinstance(raw, dict) or "image" not in raw:
        raise DatalistError(f"{where}: expected a dict with an 'image' path, got {raw!r}.")
    item = dict(raw)
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


def _json_file(path: Path) -> Path:
    if path.is_dir():
        found = [path / n for n in JSON_DATALIST_NAMES if (path / n).is_file()]
        if not found:
            raise FileNotFoundError(f"No {' or '.join(JSON_DATALIST_NAMES)} in folder {str(path)!r}.")
        path = found[0]
    if not path.is_file():
        raise FileNotFoundError(f"JSON datalist {str(path)!r} does not exist.")
    return path


def read_json_datalist(
    path: str | Path,
    section: str = "training",
    base_dir: str | Path | None = None,
    meta_keys: Sequence[str] | None = None,
    check_files: bool = True,
    on_error: str = "raise",
) -> list[dict]:
    """Read a decathlon-style JSON datalist ``{"training": [{"image": ..., "label": ..., ...}]}``.

    :func:`monai.data.load_decathlon_datalist` reads the section and resolves relative ``image``/``label`` paths
    against ``base_dir`` (default: the JSON file's folder); HDF5 paths may carry ``"#key"``; every extra field is
    kept. The patient string is the entry's ``"patient"``, else its ``"patient_id"``, else the image file name
    without suffix (then every volume is its own patient); ``"patient_id"`` becomes its class index.
    ``"dataset"`` defaults to the JSON's lower-cased ``"name"`` (or the file stem).

    Args:
        path: the JSON file, or a folder holding ``dataset.json`` or ``datalist.json``.
        section: the list to read (``"training"``, ``"validation"``, ``"test"``...).
        base_dir: folder for relative paths.
        meta_keys: meta labels to integer-encode (see :func:`~gcl_monai.data.datalist.encode_meta_labels`); the
            class names are kept under ``"<key>_name"``.
        check_files: check that the files exist and that image and label shapes match (headers only).
        on_error: ``"raise"`` or ``"skip"`` bad entries (logged).

    Returns:
        The datalist.

    Raises:
        FileNotFoundError: when the JSON file is missing.
        DatalistError: for a malformed JSON, a missing section or a bad entry (missing file, unreadable volume,
            shape mismatch) with ``on_error="raise"``.
        ValueError: for an unknown meta label.

    Example:
        >>> read_json_datalist("data/dataset.json", meta_keys=["patient_id", "organ_state"])  # doctest: +SKIP
    """
    path = _json_file(Path(path))
    try:
        content = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatalistError(f"{path}: malformed JSON ({exc}).") from exc
    if not isinstance(content, dict) or not isinstance(content.get(section), list):
        keys = sorted(content) if isinstance(content, dict) else type(content).__name__
        raise DatalistError(f"{path}: expected a list under {section!r}, found keys {keys}.")
    try:
        items = load_decathlon_datalist(path, data_list_key=section, base_dir=base_dir)
    except TypeError as exc:  # an entry that is neither a dict nor (in "test") an image path
        raise DatalistError(f"{path}[{section}]: {exc}") from exc
    dataset = str(content.get("name", path.stem)).lower()
    names = [f"{path}[{section}][{i}]" for i in range(len(items))]
    candidates = [
        (name, lambda raw=raw, name=name: _complete_item(raw, dataset, name, check_files))
        for name, raw in zip(names, items)
    ]
    datalist = collect_volumes(candidates, on_error, dataset, path)
    if meta_keys:
        encode_meta_labels(datalist, meta_keys)
    return datalist
