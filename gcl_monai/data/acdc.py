"""ACDC cine cardiac MRI readers: the official NIfTI release and the SSL4MIS HDF5 layout.

Labels: 0 background, 1 right ventricle (RV), 2 myocardium, 3 left ventricle (LV).
Meta labels: ``patient_id`` and ``organ_state`` (0 = end-diastole ED, 1 = end-systole ES).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from gcl_monai.data.datalist import (
    DatalistError,
    check_same_shape,
    collect_volumes,
    h5_path,
    h5_shapes,
    nifti_shape,
    require_dir,
)

ACDC_GROUPS = ("DCM", "HCM", "MINF", "NOR", "RV")
"""Pathology groups; ACDC training patients 1-100 come in blocks of 20 in this order."""

ACDC_LABEL_NAMES = {0: "background", 1: "RV", 2: "Myo", 3: "LV"}
ORGAN_STATES = {"ED": 0, "ES": 1}
ACDC_SECTIONS = ("training", "testing")
ACDC_LAYOUTS = {
    "official": "[training|testing/]patientXXX/{Info.cfg, patientXXX_frameYY.nii.gz, patientXXX_frameYY_gt.nii.gz}",
    "h5": "patientXXX_frameYY.h5 (datasets 'image' and 'label', (Z, H, W)), optionally under data/",
}

_PATIENT_DIR = re.compile(r"^patient\d+$", re.IGNORECASE)
_FRAME_NII = re.compile(r"^(patient\d+)_frame(\d+)\.nii(\.gz)?$", re.IGNORECASE)
_FRAME_H5 = re.compile(r"^(patient(\d+))_frame(\d+)\.h5$", re.IGNORECASE)


def acdc_group_from_number(number: int) -> str | None:
    """Pathology group of ACDC training patient ``number`` (1-100, blocks of 20), else None."""
    return ACDC_GROUPS[(number - 1) // 20] if 1 <= number <= 100 else None


# ----------------------------------------------------------------------------------------------
# layout detection
# ----------------------------------------------------------------------------------------------
def _patient_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and _PATIENT_DIR.match(p.name))


def _h5_folder(root: Path) -> Path | None:
    for folder in (root, root / "data"):
        if folder.is_dir() and any(_FRAME_H5.match(p.name) for p in folder.iterdir()):
            return folder
    return None


def detect_acdc_layout(root: str | Path) -> str | None:
    """``"official"``, ``"h5"`` or None, from file and folder names under ``root``."""
    root = Path(root)
    if not root.is_dir():
        return None
    if any((root / s).is_dir() and _patient_dirs(root / s) for s in ACDC_SECTIONS) or _patient_dirs(root):
        return "official"
    return "h5" if _h5_folder(root) is not None else None


# ----------------------------------------------------------------------------------------------
# official layout
# ----------------------------------------------------------------------------------------------
def parse_info_cfg(path: str | Path) -> dict[str, str]:
    """Parse an ACDC ``Info.cfg`` (``Key: value`` lines) into a dict of strings.

    Raises:
        DatalistError: when the file is missing or a non-empty line has no ``:``.
    """
    path = Path(path)
    if not path.is_file():
        raise DatalistError(f"{path}: Info.cfg not found.")
    info = {}
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise DatalistError(f"{path}: line {number} {line!r} is not 'Key: value'.")
        info[key.strip()] = value.strip()
    return info


def acdc_phase_frames(path: str | Path) -> tuple[int, int, str | None]:
    """``(ED frame, ES frame, group)`` from an ACDC ``Info.cfg``.

    Raises:
        DatalistError: when the file is missing, or an ``ED``/``ES`` line is missing or not an
            integer, or ED equals ES.
    """
    info = parse_info_cfg(path)
    frames = []
    for key in ORGAN_STATES:
        if key not in info:
            raise DatalistError(f"{path}: missing '{key}:' line (found keys {sorted(info)}).")
        try:
            frames.append(int(info[key]))
        except ValueError:
            raise DatalistError(f"{path}: '{key}: {info[key]}' is not an integer frame number.") from None
    if frames[0] == frames[1]:
        raise DatalistError(f"{path}: ED and ES are the same frame ({frames[0]}).")
    return frames[0], frames[1], info.get("Group") or None


def _official_item(image: Path, frame: int, patient_dir: Path) -> dict:
    ed, es, group = acdc_phase_frames(patient_dir / "Info.cfg")
    if frame not in (ed, es):
        raise DatalistError(f"{image}: frame {frame} is neither ED ({ed}) nor ES ({es}) in {patient_dir / 'Info.cfg'}.")
    stem = image.name[: image.name.lower().index(".nii")]
    label = image.with_name(stem + "_gt" + image.name[len(stem) :])
    if not label.is_file():
        raise DatalistError(f"{image}: label file {label.name} not found.")
    check_same_shape(str(image), nifti_shape(image), str(label), nifti_shape(label))
    item = {
        "image": str(image),
        "label": str(label),
        "patient": patient_dir.name,
        "organ_state": 0 if frame == ed else 1,
        "dataset": "acdc",
    }
    if group is not None:
        item["group"] = group
    return item


def _missing_frames(patient_dir: Path) -> dict:
    raise DatalistError(f"{patient_dir}: no patientXXX_frameYY.nii.gz image found.")


def read_acdc_official(root: str | Path, section: str = "training", on_error: str = "raise") -> list[dict]:
    """Read the official ACDC release.

    Args:
        root: folder holding ``training/`` and/or ``testing/``, or a folder of ``patientXXX`` folders.
        section: ``"training"`` or ``"testing"`` when ``root`` holds those folders.
        on_error: ``"raise"`` at the first bad volume, or ``"skip"`` it with a logged warning.

    Returns:
        One dict per ED/ES frame: ``image``, ``label``, ``patient``, ``patient_id``,
        ``organ_state`` (frame == Info.cfg ED -> 0, == ES -> 1), ``group`` (Info.cfg ``Group:``,
        when present) and ``dataset="acdc"``. ``patientXXX_4d.nii.gz`` is ignored.

    Raises:
        FileNotFoundError: when ``root`` (or its ``section`` folder) is missing.
        DatalistError: for a missing or malformed Info.cfg, a frame that is neither ED nor ES, a
            missing ``_gt`` label, an unreadable NIfTI or an image/label shape mismatch.
    """
    root = require_dir(root, "ACDC folder")
    if section not in ACDC_SECTIONS:
        raise ValueError(f"section must be one of {ACDC_SECTIONS}, got {section!r}.")
    if any((root / s).is_dir() for s in ACDC_SECTIONS):
        folder = require_dir(root / section, f"ACDC {section} folder")
    else:
        folder = root
    patients = _patient_dirs(folder)
    if not patients:
        raise DatalistError(f"{folder}: no patientXXX folder found. Expected: {ACDC_LAYOUTS['official']}")
    candidates = []
    for patient_dir in patients:
        images = [(p, int(m.group(2))) for p in sorted(patient_dir.iterdir()) if (m := _FRAME_NII.match(p.name))]
        if not images:
            candidates.append((str(patient_dir), lambda d=patient_dir: _missing_frames(d)))
        for image, frame in images:
            candidates.append((str(image), lambda i=image, f=frame, d=patient_dir: _official_item(i, f, d)))
    return collect_volumes(candidates, on_error, "acdc", folder)


# ----------------------------------------------------------------------------------------------
# SSL4MIS HDF5 layout
# ----------------------------------------------------------------------------------------------
def _h5_item(path: Path, patient: str, number: int, frames: list[int], frame: int) -> dict:
    if len(frames) != 2:
        raise DatalistError(
            f"{path}: patient {patient} has {len(frames)} frame file(s) {frames}; ED/ES needs exactly 2 "
            "(lower frame = ED, higher = ES)."
        )
    shapes = h5_shapes(path, ("image", "label"))
    if len(shapes["image"]) != 3:
        raise DatalistError(f"{path}: dataset 'image' has shape {shapes['image']}, expected (Z, H, W).")
    check_same_shape(h5_path(path, "image"), shapes["image"], h5_path(path, "label"), shapes["label"])
    item = {
        "image": h5_path(path, "image"),
        "label": h5_path(path, "label"),
        "patient": patient,
        "organ_state": 0 if frame == min(frames) else 1,
        "dataset": "acdc",
    }
    group = acdc_group_from_number(number)
    if group is not None:
        item["group"] = group
    return item


def read_acdc_h5(root: str | Path, on_error: str = "raise") -> list[dict]:
    """Read ACDC in the SSL4MIS layout: ``patientXXX_frameYY.h5`` files with ``image`` and ``label``.

    The lower frame number of a patient is ED (``organ_state`` 0), the higher ES (1). ``group``
    follows the ACDC training-set blocks of 20 (patients 1-100, see :data:`ACDC_GROUPS`). Only the
    HDF5 shapes are read.

    Args:
        root: the folder of h5 files, or its parent holding ``data/``.
        on_error: ``"raise"`` at the first bad volume, or ``"skip"`` it with a logged warning.

    Returns:
        One dict per frame with ``image="<file>#image"``, ``label="<file>#label"``, ``patient``,
        ``patient_id``, ``organ_state``, ``group`` and ``dataset="acdc"``.

    Raises:
        FileNotFoundError: when ``root`` is missing.
        DatalistError: for an unreadable h5, a missing ``image``/``label`` dataset, a shape
            mismatch, or a patient without exactly two frames.
    """
    root = require_dir(root, "ACDC folder")
    folder = _h5_folder(root)
    if folder is None:
        raise DatalistError(f"{root}: no patientXXX_frameYY.h5 file found. Expected: {ACDC_LAYOUTS['h5']}")
    frames: dict[str, list[tuple[int, Path]]] = defaultdict(list)
    numbers = {}
    for path in sorted(folder.iterdir()):
        if m := _FRAME_H5.match(path.name):
            frames[m.group(1)].append((int(m.group(3)), path))
            numbers[m.group(1)] = int(m.group(2))
    candidates = []
    for patient, entries in frames.items():
        frame_numbers = sorted(f for f, _ in entries)
        for frame, path in entries:
            candidates.append(
                (str(path), lambda p=path, pa=patient, f=frame, fs=frame_numbers: _h5_item(p, pa, numbers[pa], fs, f))
            )
    return collect_volumes(candidates, on_error, "acdc", folder)


def read_acdc(root: str | Path, section: str = "training", on_error: str = "raise") -> list[dict]:
    """Read ACDC in either layout, detected from ``root``'s contents.

    Args:
        root: dataset folder (official release or SSL4MIS HDF5 layout).
        section: ``"training"`` or ``"testing"`` for the official release.
        on_error: ``"raise"`` or ``"skip"`` bad volumes.

    Returns:
        The datalist, see :func:`read_acdc_official` and :func:`read_acdc_h5`.

    Raises:
        FileNotFoundError: when ``root`` is missing.
        DatalistError: when neither layout matches, or for bad volumes.
    """
    root = require_dir(root, "ACDC folder")
    layout = detect_acdc_layout(root)
    if layout == "official":
        return read_acdc_official(root, section=section, on_error=on_error)
    if layout == "h5":
        return read_acdc_h5(root, on_error=on_error)
    expected = "\n".join(f"  - acdc ({k}): {v}" for k, v in ACDC_LAYOUTS.items())
    raise DatalistError(f"{str(root)!r} matches no ACDC layout. Expected layouts:\n{expected}")
