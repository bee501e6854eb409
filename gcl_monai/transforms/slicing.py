"""Cut channel-first 3D volumes into 2D slices that carry the GCL meta labels."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from monai.config import KeysCollection
from monai.data import MetaTensor
from monai.transforms import MapTransform
from monai.transforms.traits import MultiSampleTrait
from monai.utils import ImageMetaKey, MetaKeys, ensure_tuple

__all__ = ["VolumeToSlicesd", "slice_quantiles", "SLICE_QUANTILE_KEY", "SLICE_INDEX_KEY"]

SLICE_QUANTILE_KEY = "slice_quantile"
SLICE_INDEX_KEY = "slice_index"


def slice_quantiles(num_slices: int, num_quantiles: int = 4) -> list[int]:
    """
    The ``Slice_quantile`` meta label of every slice of a volume.

    Slice ``s`` of ``Z`` falls in quantile ``q = floor(num_quantiles * s / Z) + 1`` (1-based), so quantile 1
    is the first ``1/num_quantiles`` of the slices along the slice axis (the paper's q = 1..4).

    Args:
        num_slices: number of slices ``Z`` along the slice axis.
        num_quantiles: number of parts the slices are divided into.

    Returns:
        a list of ``Z`` ints in ``1..num_quantiles``.

    Raises:
        ValueError: when ``num_slices < num_quantiles`` (some quantile would be empty) or ``num_quantiles < 1``.
    """
    if num_quantiles < 1:
        raise ValueError(f"num_quantiles must be >= 1, got {num_quantiles}.")
    if num_slices < num_quantiles:
        raise ValueError(f"{num_slices} slices cannot be divided into {num_quantiles} quantiles.")
    return [num_quantiles * s // num_slices + 1 for s in range(num_slices)]


def _names(d: Mapping) -> list[str]:
    """The keys of a dictionary as sorted strings, for error messages."""
    return sorted(map(str, d))


def _as_int64_scalar(value: Any, key: Hashable) -> torch.Tensor:
    """Convert an integer meta value (int, 0-d / 1-element tensor or array) to an int64 0-d tensor."""
    tensor = torch.as_tensor(value)
    if tensor.numel() != 1 or tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"meta key {key!r} must hold one integer, got {value!r}.")
    return tensor.reshape(()).to(torch.int64)


class VolumeToSlicesd(MapTransform, MultiSampleTrait):
    """
    Split channel-first volumes ``(C, H, W, Z)`` into a list of 2D slice dictionaries ``(C, H, W)``.

    Every output dictionary holds, for slice ``s`` of ``Z``:

    - for each key in ``keys``: the 2D slice, a ``MetaTensor`` whose meta is the volume's with a 2D affine
      (the in-plane block of the volume's affine, translated to the slice), ``spatial_shape`` of the slice,
      and an empty ``applied_operations`` (operations on the volume cannot be inverted on a slice);
    - ``"slice_quantile"``: int64 0-d tensor in ``1..num_quantiles`` (see :func:`slice_quantiles`);
    - ``"slice_index"``: int64 0-d tensor ``s``;
    - each of ``meta_keys`` (e.g. ``patient_id``, ``organ_state``) as an int64 0-d tensor, so that a batch
      collated by ``list_data_collate`` holds them as ``(B,)`` integer tensors;
    - every other entry of the input (e.g. ``"patient"``, ``"dataset"``), shared, not copied.

    Like the other MONAI transforms that return several samples (e.g. ``RandCropByPosNegLabeld``), it
    returns a list; in a ``Compose`` with ``map_items=True`` (the default) the transforms after it are
    applied to each slice, and ``list_data_collate`` flattens the lists into one batch. The transform is
    deterministic, so datasets cache its result.

    Args:
        keys: keys of the volumes to slice; they must share their spatial shape.
        meta_keys: integer meta labels copied to every slice as int64 0-d tensors.
        num_quantiles: number of ``Slice_quantile`` classes (4 in the paper).
        slice_axis: the spatial axis to slice along, counted over the spatial dimensions only (the channel
            dimension excluded): -1 (default) is the last axis, ``z`` for NIfTI and for ``H5Reader`` output.
        allow_missing_keys: skip missing keys of ``keys`` (at least one must be present) and of ``meta_keys``.

    Raises:
        KeyError: a meta key, or all of ``keys``, missing (the message lists the available keys); with
            ``allow_missing_keys`` missing meta keys and missing keys among several are skipped.
        ValueError: volumes of different spatial shapes, a volume that is not 3D, or fewer slices than
            ``num_quantiles`` (messages name the file).
        TypeError: a meta value is not a single integer.
    """

    def __init__(
        self,
        keys: KeysCollection = ("image", "label"),
        meta_keys: Sequence[str] | str | None = ("patient_id", "organ_state"),
        num_quantiles: int = 4,
        slice_axis: int = -1,
        allow_missing_keys: bool = False,
    ) -> None:
        super().__init__(keys, allow_missing_keys)
        if num_quantiles < 1:
            raise ValueError(f"num_quantiles must be >= 1, got {num_quantiles}.")
        if not -3 <= slice_axis <= 2:
            raise ValueError(f"slice_axis must be a spatial axis of a 3D volume (-3..2), got {slice_axis}.")
        self.meta_keys = ensure_tuple(meta_keys) if meta_keys is not None else ()
        self.num_quantiles = num_quantiles
        self.slice_axis = slice_axis % 3

    @staticmethod
    def _filename(volume: Any) -> str:
        if isinstance(volume, MetaTensor):
            return str(volume.meta.get(ImageMetaKey.FILENAME_OR_OBJ, "<unknown file>"))
        return "<unknown file>"

    def _slice_meta(self, volume: MetaTensor, index: int, in_plane_shape: Sequence[int]) -> dict:
        """Meta data of one slice: the volume's, with a 2D affine translated to the slice."""
        meta = dict(volume.meta)
        affine = volume.affine.clone()
        shift = torch.eye(4, dtype=affine.dtype)
        shift[self.slice_axis, 3] = index
        affine = affine @ shift
        keep = [d for d in range(3) if d != self.slice_axis] + [3]
        meta[MetaKeys.AFFINE] = affine[keep][:, keep]
        meta[MetaKeys.SPATIAL_SHAPE] = np.asarray(in_plane_shape)
        return meta

    def __call__(self, data: Mapping[Hashable, Any]) -> list[dict[Hashable, Any]]:
        """
        Args:
            data: a dictionary with channel-first 3D volumes under ``keys`` and integer meta labels.

        Returns:
            one dictionary per slice, in slice order.
        """
        d = dict(data)
        keys = list(self.key_iterator(d))
        if not keys:
            raise KeyError(f"VolumeToSlicesd: none of the keys {list(self.keys)} found; available keys: {_names(d)}.")
        filename = self._filename(d[keys[0]])
        shapes = {}
        for key in keys:
            if d[key].ndim != 4:
                raise ValueError(
                    f"VolumeToSlicesd: {key!r} of {filename} must be a channel-first 3D volume (C, H, W, Z), "
                    f"got shape {tuple(d[key].shape)}."
                )
            shapes[key] = tuple(d[key].shape[1:])
        if len(set(shapes.values())) > 1:
            raise ValueError(f"VolumeToSlicesd: spatial shapes differ in {filename}: {shapes}.")
        num_slices = shapes[keys[0]][self.slice_axis]
        if num_slices < self.num_quantiles:
            raise ValueError(
                f"VolumeToSlicesd: {filename} has {num_slices} slices along spatial axis {self.slice_axis}, "
                f"fewer than num_quantiles={self.num_quantiles}."
            )
        meta_values = {}
        for key in self.meta_keys:
            if key in d:
                meta_values[key] = _as_int64_scalar(d[key], key)
            elif not self.allow_missing_keys:
                raise KeyError(f"VolumeToSlicesd: meta key {key!r} not found; available keys: {_names(d)}.")
        quantiles = slice_quantiles(num_slices, self.num_quantiles)
        in_plane = [s for a, s in enumerate(shapes[keys[0]]) if a != self.slice_axis]
        out = []
        for index, quantile in enumerate(quantiles):
            item = dict(d)
            for key in keys:
                volume = d[key]
                array = volume.as_tensor() if isinstance(volume, MetaTensor) else torch.as_tensor(volume)
                plane = array.select(self.slice_axis + 1, index).clone()  # own storage: no view of the volume
                if isinstance(volume, MetaTensor):
                    plane = MetaTensor(plane, meta=self._slice_meta(volume, index, in_plane))
                item[key] = plane
            item.update({k: v.clone() for k, v in meta_values.items()})
            item[SLICE_QUANTILE_KEY] = torch.tensor(quantile, dtype=torch.int64)
            item[SLICE_INDEX_KEY] = torch.tensor(index, dtype=torch.int64)
            out.append(item)
        return out
