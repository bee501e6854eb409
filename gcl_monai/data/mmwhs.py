"""MM-WHS (Multi-Modality Whole Heart Segmentation) reader.

Labels are stored as the raw MM-WHS intensities :data:`MMWHS_LABEL_VALUES` (205 LV myocardium,
420 left atrium, 500 LV blood cavity, 550 right atrium, 600 RV blood cavity, 820 ascending aorta,
850 pulmonary artery). This reader does not change them: the training pipeline maps them to
``1..7`` with ``MapLabelValued("label", orig_labels=MMWHS_LABEL_VALUES, target_labels=range(1, 8))``.
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

MMWHS_LABEL_VALUES = (205, 420, 500, 550, 600, 820, 850)
"""Raw MM-WHS label values, mapped to classes 1..7 in this order by the pipeline."""

MMWHS_LABEL_NAMES = {0: "background", 1: "Myo", 2: "LA", 3: "LV", 4: "RA", 5: "RV", 6: "AA", 7: "PA"}
MMWHS_MODALITIES = ("ct", "mr")
MMWHS_LAYOUTS = {
    "mmwhs": "[ct_train/|mr_train/]ct_train_NNNN_image.nii.gz + ct_train_NNNN_label.nii.gz (or mr_train_*)",
}
_FILE = re.compile(r"^(ct|mr)_train_(\d+)_(image|label)$", re.IGNORECASE)


def _scan(root: Path) -> dict[tuple[str, str], dict[str, Path]]:
    """``(modality, number) -> {"image": path, "label": path}`` over ``root`` and its ``*_train`` folders."""
    found: dict[tuple[str, str], dict[str, Path]] = {}
    for folder in (root, *(root / f"{m}_train" for m in MMWHS_MODALITIES)):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            stem = nifti_stem(path.name)
            if stem is not None and (m := _FILE.match(stem)):
                found.setdefault((m.group(1).lower(), m.group(2)), {})[m.group(3).lower()] = path
    return found


def detect_mmwhs_layout(root: str | Path) -> str | None:
    """``"mmwhs"`` when ``root`` holds MM-WHS training files, else None."""
    root = Path(root)
    return "mmwhs" if root.is_dir() and _scan(root) else None


def _item(files: dict[str, Path], modality: str, number: str, prefix: bool) -> dict:
    if "image" not in files:
        raise DatalistError(f"{files['label']}: label file without a matching image.")
    if "label" not in files:
        raise DatalistError(f"{files['image']}: no matching label file ({modality}_train_{number}_label.nii.gz).")
    check_same_shape(str(files["image"]), nifti_shape(files["image"]), str(files["label"]), nifti_shape(files["label"]))
    return {
        "image": str(files["image"]),
        "label": str(files["label"]),
        "patient": f"{modality}_{number}" if prefix else number,
        "modality": modality,
        "dataset": "mmwhs",
    }


def read_mmwhs(root: str | Path, modality: str | None = None, on_error: str = "raise") -> list[dict]:
    """Read MM-WHS training volumes (labels keep their raw values, see the module docstring).

    Args:
        root: folder holding ``ct_train_*``/``mr_train_*`` files, directly or in ``ct_train/`` and
            ``mr_train/``.
        modality: ``"ct"``, ``"mr"``, ``"all"``, or None for CT when present, else MR. CT and MR
            subjects share numbers, so with ``"all"`` patients are ``"ct_1001"``/``"mr_1001"``,
            otherwise ``"1001"``.
        on_error: ``"raise"`` at the first bad volume, or ``"skip"`` it with a logged warning.

    Returns:
        One dict per volume: ``image``, ``label``, ``patient``, ``patient_id``, ``modality`` and
        ``dataset="mmwhs"``.

    Raises:
        FileNotFoundError: when ``root`` is missing.
        ValueError: for an unknown modality.
        DatalistError: when no volume of that modality exists, or for an image without label (or
            the reverse), an unreadable NIfTI, or an image/label shape mismatch.
    """
    root = require_dir(root, "MM-WHS folder")
    if modality not in (None, "all", *MMWHS_MODALITIES):
        raise ValueError(f"modality must be None, 'all', 'ct' or 'mr', got {modality!r}.")
    found = _scan(root)
    present = sorted({m for m, _ in found})
    if modality is None:
        modality = "ct" if "ct" in present else (present[0] if present else "ct")
    wanted = present if modality == "all" else [modality]
    if not set(wanted) & set(present):
        raise DatalistError(
            f"{root}: no MM-WHS {modality} training file (found modalities {present}). "
            f"Expected: {MMWHS_LAYOUTS['mmwhs']}"
        )
    candidates = [
        (str(next(iter(files.values()))), lambda f=files, m=m, n=n: _item(f, m, n, modality == "all"))
        for (m, n), files in sorted(found.items())
        if m in wanted
    ]
    return collect_volumes(candidates, on_error, "mmwhs", root)
