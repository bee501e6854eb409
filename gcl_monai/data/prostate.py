"""Prostate T2 MRI readers: the multi-site layout (NCI-ISBI 2013 cases) and the Medical
Segmentation Decathlon's Task05_Prostate.

Both layouts number the zones alike: 1 = peripheral zone (PZ), 2 = transition zone (TZ, the central gland). The
Decathlon documents it in its dataset.json; for the multi-site masks it was measured
(docs/results/gate-fullsup_prostate, "A finding about the zone names"): in all 31 cases label 1 lies posterior of
label 2 and is a crescent.
:func:`peripheral_zone_label` checks the numbering of other masks the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gcl_monai.data.datalist import (
    DatalistError,
    check_same_shape,
    collect_volumes,
    list_nifti,
    nifti_shape,
    require_dir,
)

PROSTATE_LABEL_NAMES = {0: "background", 1: "PZ", 2: "TZ"}
"""The zone of each label value, in both layouts."""

MSD_T2_CHANNEL = 0
PROSTATE_LAYOUTS = {
    "multisite": "images/CaseNN.nii.gz + masks/CaseNN_Segmentation.nii.gz (names case-insensitive)",
    "msd": "Task05_Prostate: dataset.json, imagesTr/prostate_NN.nii.gz (4D, channel 0 = T2), "
    "labelsTr/prostate_NN.nii.gz",
}
_MASK_SUFFIX = "_segmentation"


def detect_prostate_layout(root: str | Path) -> str | None:
    """``"multisite"``, ``"msd"`` or None, from file and folder names under ``root``."""
    root = Path(root)
    if (root / "images").is_dir() and (root / "masks").is_dir():
        return "multisite"
    if (root / "imagesTr").is_dir() and any(s.startswith("prostate") for s in list_nifti(root / "imagesTr")):
        return "msd"
    return None


def _item(image: Path, label: Path | None, patient: str, channel: bool) -> dict:
    if label is None:
        raise DatalistError(f"{image}: no matching label file.")
    image_shape = nifti_shape(image)
    check_same_shape(str(image), image_shape, str(label), nifti_shape(label))
    item = {"image": str(image), "label": str(label), "patient": patient, "dataset": "prostate"}
    if channel and len(image_shape) == 4:
        item["channel"] = MSD_T2_CHANNEL
    return item


def _orphan(label: Path) -> dict:
    raise DatalistError(f"{label}: label file without a matching image.")


def _pair_candidates(images: dict[str, Path], labels: dict[str, Path], label_suffix: str, channel: bool) -> list:
    candidates = []
    matched = set()
    for stem, image in images.items():
        label = labels.get(stem + label_suffix)
        matched.add(stem + label_suffix)
        patient = image.name[: len(stem)]
        candidates.append((str(image), lambda i=image, la=label, p=patient: _item(i, la, p, channel)))
    for stem, label in labels.items():
        if stem not in matched:
            candidates.append((str(label), lambda la=label: _orphan(la)))
    return candidates


def read_prostate(root: str | Path, on_error: str = "raise") -> list[dict]:
    """Read prostate MRI in the multi-site or MSD Task05 layout (detected from ``root``).

    Multi-site: ``images/CaseNN.nii.gz`` pairs with ``masks/CaseNN_Segmentation.nii.gz``
    (case-insensitive). MSD: ``imagesTr/prostate_NN.nii.gz`` pairs with ``labelsTr/`` files of the
    same name; images are 4D (T2, ADC), so each dict records ``"channel": 0`` (T2) for the loader.
    Only NIfTI headers are read. See the module docstring for the label conventions.

    Args:
        root: dataset folder.
        on_error: ``"raise"`` at the first bad volume, or ``"skip"`` it with a logged warning.

    Returns:
        One dict per case: ``image``, ``label``, ``patient`` (``"Case07"``, ``"prostate_16"``),
        ``patient_id``, ``dataset="prostate"`` and, for 4D MSD images, ``channel``.

    Raises:
        FileNotFoundError: when ``root`` is missing.
        DatalistError: when no layout matches, or for an image without label (or label without
            image), an unreadable NIfTI, or an image/label shape mismatch.
    """
    root = require_dir(root, "prostate folder")
    layout = detect_prostate_layout(root)
    if layout == "multisite":
        candidates = _pair_candidates(list_nifti(root / "images"), list_nifti(root / "masks"), _MASK_SUFFIX, False)
    elif layout == "msd":
        labels_dir = require_dir(root / "labelsTr", "MSD labelsTr folder")
        candidates = _pair_candidates(list_nifti(root / "imagesTr"), list_nifti(labels_dir), "", True)
    else:
        expected = "\n".join(f"  - prostate ({k}): {v}" for k, v in PROSTATE_LAYOUTS.items())
        raise DatalistError(f"{str(root)!r} matches no prostate layout. Expected layouts:\n{expected}")
    return collect_volumes(candidates, on_error, "prostate", root)


def peripheral_zone_label(mask_path: str | Path) -> int:
    """The label value (1 or 2) of the peripheral zone in one zonal mask, told by its place.

    The peripheral zone wraps the transition zone from behind, so its centroid lies posterior of the transition
    zone's in patient coordinates (the NIfTI affine's world axes, RAS+: posterior is the lower y). Compare the result
    with :data:`PROSTATE_LABEL_NAMES` before training on masks from another source; map them with
    :class:`monai.transforms.MapLabelValued` (the bundle's ``label_map``) if it is 2.

    Raises:
        DatalistError: naming the file when it lacks label 1 or label 2.
    """
    import nibabel as nib  # here, not at the top: a GPU session's wheels carry no nibabel (test_volume_loading)

    image = nib.load(str(mask_path))
    mask = np.asarray(image.dataobj)
    centroids = {}
    for value in (1, 2):
        voxels = np.argwhere(mask == value)
        if len(voxels) == 0:
            raise DatalistError(f"{mask_path}: no voxel of label {value}; a zonal mask needs labels 1 and 2.")
        centroids[value] = nib.affines.apply_affine(image.affine, voxels.mean(axis=0))
    return 1 if centroids[1][1] < centroids[2][1] else 2
