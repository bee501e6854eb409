"""MONAI's ``PydicomReader`` with the slices of a series stacked by position along the slice normal."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from monai.config import PathLike
from monai.data import PydicomReader

__all__ = ["PositionSortedPydicomReader"]


class PositionSortedPydicomReader(PydicomReader):
    """
    ``PydicomReader`` that stacks the slices of a DICOM series folder in the order of their position along the slice
    normal (ImagePositionPatient projected on the cross product of ImageOrientationPatient's direction cosines).

    ``PydicomReader`` stacks by InstanceNumber, which the DICOM standard does not tie to the geometry: in a cine series
    exported one series per slice location every slice of a phase has the same InstanceNumber, and many exports number
    from the apex or interleave phases. Here the datasets read (in memory, the files are not touched) are renumbered in
    position order before ``PydicomReader`` stacks them, so that the stack and its affine (from the first and last
    ImagePositionPatient) follow the anatomy. Everything else is ``PydicomReader``'s.

    Args:
        args, kwargs: passed to ``PydicomReader`` (e.g. ``affine_lps_to_ras``, ``swap_ij``).

    Example:
        ``LoadImaged(keys="image", reader=PositionSortedPydicomReader())`` on ``{"image": "<folder of one series>"}``.
    """

    def read(self, data: Sequence[PathLike] | PathLike, **kwargs):
        """Read like ``PydicomReader.read``; the datasets of each series folder come back in position order."""
        images = super().read(data, **kwargs)
        if not self.has_series:
            return images
        single = not isinstance(images, list) or not images or not isinstance(images[0], list)
        series_list = [images] if single else images
        for i, series in enumerate(series_list):
            if not isinstance(series, list) or any("ImagePositionPatient" not in ds for ds in series):
                continue
            row_col = np.asarray(series[0].ImageOrientationPatient, dtype=float)
            normal = np.cross(row_col[:3], row_col[3:])
            order = np.argsort([float(np.dot(ds.ImagePositionPatient, normal)) for ds in series], kind="stable")
            series[:] = [series[j] for j in order]
            names = self.filenames[i]
            if isinstance(names, list):
                self.filenames[i] = [names[j] for j in order]
            for number, ds in enumerate(series, start=1):
                ds.InstanceNumber = number
        return images
