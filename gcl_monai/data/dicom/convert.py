"""One-time conversion of indexed DICOM volumes to NIfTI in a cache folder, so that pre-training reads each volume
once from DICOM and every epoch from NIfTI."""

from __future__ import annotations

import logging
from pathlib import Path

from gcl_monai.data.datalist import DatalistError
from gcl_monai.data.dicom.index import DicomVolume
from gcl_monai.utils import atomic_write

logger = logging.getLogger("gcl_monai.data")

__all__ = ["convert_volume"]


def convert_volume(volume: DicomVolume, cache_dir: str | Path) -> str:
    """The volume as ``<cache_dir>/<volume_id>.nii.gz``, written on the first call.

    SimpleITK's series reader (GDCM) reads the slices in the index's order (position along the slice normal) and
    applies the rescale slope and intercept; the NIfTI keeps the voxel order (first axis along the DICOM rows'
    direction, i.e. the columns; third axis along the normal) and the patient geometry. The file name is a hash of the
    slices' SOPInstanceUIDs, so a changed series gets a new file and an unchanged one is never converted again.

    Args:
        volume: the indexed volume.
        cache_dir: the cache folder (created).

    Returns:
        The NIfTI path.

    Raises:
        DatalistError: naming the series and the reason when the pixel data cannot be read.
    """
    import SimpleITK as sitk

    path = Path(cache_dir) / f"{volume.volume_id}.nii.gz"
    if path.is_file():
        return str(path)
    try:
        image = sitk.ReadImage(volume.files)
    except RuntimeError as exc:
        raise DatalistError(f"series {', '.join(volume.series)}: pixel data unreadable ({exc}).") from exc
    with atomic_write(path, suffix=".nii.gz") as partial:  # SimpleITK writes by the extension
        sitk.WriteImage(image, str(partial))
    logger.debug("Converted %d slices of series %s to %s.", len(volume.files), ", ".join(volume.series), path)
    return str(path)
