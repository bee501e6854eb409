"""The datalist of an inference folder: every NIfTI volume, every frame of a 4D series as its own case, and every 3D
volume of the DICOM files in it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from gcl_monai.data.datalist import DatalistError, nifti_shape, nifti_stem, require_dir
from gcl_monai.data.dicom.inference import dicom_inference_cases
from gcl_monai.data.dicom.reader import detect_dicom_layout

__all__ = ["inference_datalist"]

logger = logging.getLogger("gcl_monai.data")


def inference_datalist(
    folder: str | Path,
    frame: int | None = None,
    exclude: Sequence[str] = ("_gt.nii.gz", "_gt.nii"),
    staging_dir: str | Path | None = None,
) -> list[dict]:
    """
    The NIfTI files under ``folder`` (recursively, sorted), one item ``{"image": path}`` per 3D volume. A 4D file
    ``(H, W, D, T)`` with T > 1 gives one item ``{"image": path, "frame": t}`` per frame (``frame`` None) or only
    the chosen frame; :py:class:`gcl_monai.transforms.SelectFramed` then keeps that frame. Only headers are read; a
    file whose header cannot be read is still listed, so that its failure is reported with its name when it is
    loaded. When the folder holds DICOM files, each 3D volume they form is a case too (see
    :py:func:`gcl_monai.data.dicom.dicom_inference_cases`: its slices linked into a folder of their own under
    ``staging_dir``, read by :py:class:`gcl_monai.transforms.PositionSortedPydicomReader`; a stack that cannot be
    segmented is a case marked ``"skipped"`` with the reason).

    Args:
        folder: the inference folder.
        frame: the frame to segment in every 4D file (None: all frames).
        exclude: file name endings left out (label files).
        staging_dir: folder of the DICOM cases' links (default: a new temporary folder).

    Raises:
        FileNotFoundError: when ``folder`` is not a folder.

    Example:
        >>> inference_datalist("new_cases")  # doctest: +SKIP
        [{'image': 'new_cases/p1.nii.gz'}, {'image': 'new_cases/p2_4d.nii.gz', 'frame': 0}, ...]
    """
    folder = require_dir(folder, "inference folder")
    nifti = sorted(p for p in folder.rglob("*") if p.is_file() and nifti_stem(p.name))
    files = [p for p in nifti if not p.name.endswith(tuple(exclude))]
    if len(files) < len(nifti):
        logger.info("%s: left out %d NIfTI file(s) ending in %s.", folder, len(nifti) - len(files), list(exclude))
    items: list[dict] = []
    for path in files:
        try:
            shape = nifti_shape(path)
        except DatalistError as error:
            logger.warning("%s", error)
            shape = ()
        frames = shape[3] if len(shape) == 4 else 1
        if frames > 1:
            chosen = range(frames) if frame is None else [frame]
            items.extend({"image": str(path), "frame": t} for t in chosen)
        else:
            items.append({"image": str(path)})
    if detect_dicom_layout(folder) is not None:
        items.extend(dicom_inference_cases(folder, staging_dir))
    if not items:
        logger.warning("No NIfTI or DICOM file to segment in %s (endings left out: %s).", folder, list(exclude))
    return items
