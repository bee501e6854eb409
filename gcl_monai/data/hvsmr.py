"""HVSMR 2016 (whole-heart and great vessel segmentation from 3D cardiovascular MRI) reader.

Labels: 0 background, 1 myocardium, 2 blood pool.
"""

from __future__ import annotations

import re
from pathlib import Path

from gcl_monai.data.datalist import (
    DatalistError,
    check_same_shape,
    collect_volumes,
    nifti_shape,
    nifti_stem,
    require_dir,
)

HVSMR_LABEL_NAMES = {0: "background", 1: "myocardium", 2: "blood pool"}
HVSMR_VARIANTS = ("crop", "full")
HVSMR_LAYOUTS = {"hvsmr": "training_axial_crop_patN.nii.gz + training_axial_crop_patN-label.nii.gz"}
_FILE = re.compile(r"^training_axial_(crop|full)_(pat\d+)(-label)?$", re.IGNORECASE)


def _scan(root: Path, variant: str | None) -> dict[str, dict[str, Path]]:
    """``patient -> {"image": path, "label": path}`` for the files of ``variant`` (None: any)."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(root.iterdir()):
        stem = nifti_stem(path.name)
        if stem is not None and (m := _FILE.match(stem)) and variant in (None, m.group(1).lower()):
            found.setdefault(m.group(2).lower(), {})["label" if m.group(3) else "image"] = path
    return found


def detect_hvsmr_layout(root: str | Path) -> str | None:
    """``"hvsmr"`` when ``root`` holds HVSMR 2016 training files, else None."""
    root = Path(root)
    return "hvsmr" if root.is_dir() and _scan(root, None) else None


def _item(files: dict[str, Path], patient: str) -> dict:
    if "image" not in files:
        raise DatalistError(f"{files['label']}: label file without a matching image.")
    if "label" not in files:
        raise DatalistError(f"{files['image']}: no matching '-label' file.")
    check_same_shape(str(files["image"]), nifti_shape(files["image"]), str(files["label"]), nifti_shape(files["label"]))
    return {"image": str(files["image"]), "label": str(files["label"]), "patient": patient, "dataset": "hvsmr"}


def read_hvsmr(root: str | Path, variant: str = "crop", on_error: str = "raise") -> list[dict]:
    """Read HVSMR 2016 training volumes.

    Args:
        root: folder holding ``training_axial_{crop,full}_patN[-label].nii.gz``.
        variant: ``"crop"`` (cropped around the heart) or ``"full"`` volumes.
        on_error: ``"raise"`` at the first bad volume, or ``"skip"`` it with a logged warning.

    Returns:
        One dict per volume: ``image``, ``label``, ``patient`` (``"pat3"``), ``patient_id`` and
        ``dataset="hvsmr"``.

    Raises:
        FileNotFoundError: when ``root`` is missing.
        ValueError: for an unknown variant.
        DatalistError: when no file of that variant exists, or for an image without label (or the
            reverse), an unreadable NIfTI, or an image/label shape mismatch.
    """
    root = require_dir(root, "HVSMR folder")
    if variant not in HVSMR_VARIANTS:
        raise ValueError(f"variant must be one of {HVSMR_VARIANTS}, got {variant!r}.")
    found = _scan(root, variant)
    if not found:
        expected = HVSMR_LAYOUTS["hvsmr"].replace("crop", variant)
        raise DatalistError(f"{root}: no HVSMR {variant} file. Expected: {expected}")
    candidates = [
        (str(next(iter(files.values()))), lambda f=files, p=patient: _item(f, p))
        for patient, files in sorted(found.items())
    ]
    return collect_volumes(candidates, on_error, "hvsmr", root)
