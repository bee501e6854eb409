"""Loading the volumes of a datalist: MONAI's ``LoadImaged`` that also reads HDF5."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from monai.config import DtypeLike, KeysCollection
from monai.data import NibabelReader
from monai.transforms import LoadImaged
from monai.utils import OptionalImportError

from gcl_monai.transforms.h5_reader import H5Reader

__all__ = ["LoadVolumed"]


class LoadVolumed(LoadImaged):
    """
    MONAI's ``LoadImaged`` for the volumes of a datalist, NIfTI or HDF5 (``file.h5#dataset``; a DICOM archive is
    converted to NIfTI first): float32 and image only by default, the reader chosen by the file's suffix as MONAI
    chooses among its default readers, with ``NibabelReader`` and :class:`H5Reader` registered last (tried first,
    each only on its suffixes). Naming readers with ``reader`` instead would make ``LoadImaged`` try each one on
    every file, logging every reader that fails.

    MONAI's ``LoadImage`` constructs each of its default readers; with pydicom installed its
    ``NvImgCodecPydicomReader`` warns at every construction that the nvImageCodec plugin did not register, which is
    irrelevant to NIfTI and HDF5: that one warning is silenced while the loader is built, no other. Without nibabel
    ``NibabelReader`` is left out, as ``LoadImage`` leaves out a default reader whose package is missing: HDF5 volumes
    load as before on a machine that has no nibabel.

    Args:
        keys: keys of the file names to load.
        dtype: data type of the loaded arrays.
        image_only: return the arrays as ``MetaTensor`` without a separate meta dictionary.
        kwargs: passed to ``LoadImaged``.
    """

    def __init__(self, keys: KeysCollection, dtype: DtypeLike = np.float32, image_only: bool = True, **kwargs: Any):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="NvImgCodecPydicomReader", category=UserWarning)
            super().__init__(keys=keys, dtype=dtype, image_only=image_only, **kwargs)
        try:
            self.register(NibabelReader())
        except OptionalImportError:  # no nibabel: skipped, as LoadImage skips its default readers (HDF5 needs none)
            pass
        self.register(H5Reader())
