"""A MONAI ``ImageReader`` for HDF5 volumes addressed as ``path.h5#dataset``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from monai.data import ImageReader
from monai.utils import ImageMetaKey, MetaKeys, OptionalImportError, SpaceKeys, ensure_tuple, optional_import

from gcl_monai.data.datalist import H5_KEY_SEPARATOR, H5_SUFFIXES, split_h5_path

h5py, has_h5py = optional_import("h5py")

__all__ = ["H5Reader"]


@dataclass(frozen=True)
class _H5Volume:
    """An array read from one HDF5 dataset, with where it came from."""

    array: np.ndarray
    file_path: str
    dataset: str


class H5Reader(ImageReader):
    """
    Load a volume stored as an HDF5 dataset, for use with ``LoadImage``/``LoadImaged``.

    Filenames are written ``"path/to/file.h5#dataset"`` (e.g. ``"patient001_frame01.h5#image"`` and
    ``"patient001_frame01.h5#label"`` for the SSL4MIS ACDC files); without ``#`` the ``default_dataset``
    is read. ``"file.h5::dataset"``, what a MONAI bundle config makes of a literal ``#``, works too.

    The arrays of the SSL4MIS layout are stored ``(Z, H, W)``, i.e. ``(z, y, x)`` as written by SimpleITK's
    ``GetArrayFromImage``; this reader reverses the axes so that data come back in MONAI's spatial
    convention ``(x, y, z)``, like ``NibabelReader`` returns NIfTI data: the slice axis is the last axis.
    Set ``reverse_indexing=False`` for files already stored ``(x, y, z)``.

    The files carry no geometry, so the affine is the identity (unit spacing, origin 0): spacing is
    unknown and any physical-size reasoning must come from elsewhere. The data have no channel
    dimension (``original_channel_dim`` is MONAI's "no channel" marker, ``nan``, as ``NibabelReader``
    writes it, so that ``EnsureChannelFirstd`` adds one and meta data of h5 and NIfTI items collate
    together). When several filenames are given they are stacked as channels (first dimension).

    Usage:

    .. code-block:: python

        LoadImaged(keys=["image", "label"], reader=H5Reader())
        # or, from a bundle config: {"_target_": "gcl_monai.transforms.H5Reader", "default_dataset": "image"}

    Args:
        default_dataset: dataset to read when a filename has no ``#dataset`` part; None requires it.
        reverse_indexing: reverse the array axes (``(z, y, x)`` -> ``(x, y, z)``), default True.
        dtype: optional numpy dtype the array is converted to after reading; None keeps the stored dtype.

    Raises:
        OptionalImportError: on ``read`` when h5py is not installed.
    """

    def __init__(
        self, default_dataset: str | None = None, reverse_indexing: bool = True, dtype: np.dtype | str | None = None
    ) -> None:
        super().__init__()
        self.default_dataset = default_dataset
        self.reverse_indexing = reverse_indexing
        self.dtype = dtype

    def verify_suffix(self, filename: Sequence[os.PathLike] | os.PathLike) -> bool:
        """
        Whether all the given filenames are HDF5 files (``.h5``, ``.hdf5``, ``.hdf``, with or without ``#dataset``).

        Args:
            filename: file name or a sequence of file names.
        """
        for name in ensure_tuple(filename):
            if not split_h5_path(name)[0].lower().endswith(H5_SUFFIXES):
                return False
        return True

    def read(self, data: Sequence[os.PathLike] | os.PathLike, **kwargs) -> _H5Volume | list[_H5Volume]:
        """
        Read the named dataset(s) into memory (the file is closed afterwards).

        Args:
            data: a filename ``"file.h5#dataset"`` or a sequence of them.
            kwargs: unused, accepted for API compatibility with other readers.

        Returns:
            one loaded volume, or a list of them for a sequence of filenames.

        Raises:
            ValueError: a filename is not an HDF5 file, or names no dataset and there is no default.
            FileNotFoundError: the file does not exist.
            KeyError: the file has no such dataset (the message lists the datasets it has).
            TypeError: the name points to an HDF5 group, not a dataset.
        """
        if not has_h5py:
            raise OptionalImportError("H5Reader needs h5py: pip install h5py (or gcl-monai[h5]).")
        names = ensure_tuple(data)
        volumes = [self._read_one(name) for name in names]
        return volumes if len(names) > 1 else volumes[0]

    def _read_one(self, name: os.PathLike | str) -> _H5Volume:
        if not self.verify_suffix(name):
            raise ValueError(f"H5Reader: {os.fspath(name)!r} is not an HDF5 file (expected one of {H5_SUFFIXES}).")
        file_path, dataset = split_h5_path(name, self.default_dataset)
        if dataset is None:
            raise ValueError(
                f"H5Reader: no dataset named in {os.fspath(name)!r}: write 'file.h5#dataset' or set "
                "H5Reader(default_dataset=...)."
            )
        if not Path(file_path).is_file():
            raise FileNotFoundError(f"H5Reader: no such file {file_path!r} (from {os.fspath(name)!r}).")
        with h5py.File(file_path, "r") as handle:
            if dataset not in handle:
                available = []
                handle.visititems(lambda key, obj: available.append(key) if isinstance(obj, h5py.Dataset) else None)
                raise KeyError(
                    f"H5Reader: file {file_path!r} has no dataset {dataset!r}; available datasets: {sorted(available)}."
                )
            node = handle[dataset]
            if not isinstance(node, h5py.Dataset):
                raise TypeError(f"H5Reader: {dataset!r} in file {file_path!r} is a group, not a dataset.")
            array = np.asarray(node[()])
        if self.dtype is not None:
            array = array.astype(self.dtype, copy=False)
        return _H5Volume(array=array, file_path=file_path, dataset=dataset)

    def get_data(self, img: _H5Volume | Sequence[_H5Volume]) -> tuple[np.ndarray, dict]:
        """
        Return the array in ``(x, y, z)`` order and its meta data.

        Args:
            img: what ``read`` returned.

        Returns:
            ``(array, meta)``, meta with ``affine``/``original_affine`` (identity), ``spatial_shape``,
            ``original_channel_dim``, ``space``, ``filename_or_obj`` and ``h5_dataset``.

        Raises:
            ValueError: when several volumes of different shapes are to be stacked.
        """
        volumes = list(ensure_tuple(img))
        arrays = [np.ascontiguousarray(v.array.transpose()) if self.reverse_indexing else v.array for v in volumes]
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            files = [f"{v.file_path}#{v.dataset}" for v in volumes]
            raise ValueError(f"H5Reader: cannot stack datasets of different shapes {sorted(shapes)} from {files}.")
        spatial_shape = arrays[0].shape
        meta = {
            MetaKeys.AFFINE: np.eye(len(spatial_shape) + 1),
            MetaKeys.ORIGINAL_AFFINE: np.eye(len(spatial_shape) + 1),
            MetaKeys.SPATIAL_SHAPE: np.asarray(spatial_shape),
            MetaKeys.SPACE: SpaceKeys.RAS,
            MetaKeys.ORIGINAL_CHANNEL_DIM: float("nan") if len(arrays) == 1 else 0,
            ImageMetaKey.FILENAME_OR_OBJ: f"{volumes[0].file_path}{H5_KEY_SEPARATOR}{volumes[0].dataset}",
            "h5_dataset": volumes[0].dataset,
        }
        data = arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=0)
        return data, meta
