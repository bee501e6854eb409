"""
The in-plane field of view of a volume: a centred square crop that keeps the aspect ratio of the anatomy.

``CenterScaleCrop`` keeps the central fraction of every axis, so a 256 x 176 slice becomes a 205 x 141 crop and,
resized to a square, stretches the organ by the slice's aspect ratio (up to 1.45 in ACDC). :class:`CenterSquareCrop`
keeps a square of side ``roi_scale`` times the shorter in-plane side: after a resize to a square the organ keeps its
shape and, along the longer axis, its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import ceil

import torch
from monai.config import KeysCollection
from monai.data import MetaTensor
from monai.transforms import CenterScaleCropd, CenterSpatialCrop, Crop, Cropd, Identityd

__all__ = ["FOV_SHAPES", "CenterSquareCrop", "CenterSquareCropd", "field_of_view_crop"]

#: ``"scaled"``: the central ``fov_scale`` of each in-plane axis (``CenterScaleCrop``); ``"square"``: a centred
#: square of side ``fov_scale`` times the shorter in-plane side (:class:`CenterSquareCrop`)
FOV_SHAPES = ("scaled", "square")


class CenterSquareCrop(Crop):
    """
    Crop a centred square of side ``ceil(roi_scale * min(in-plane sizes))`` in the plane of ``plane_axes``; the
    other spatial axes are kept whole. Invertible (``Crop``'s inverse pads the crop back), capable of lazy execution.

    Args:
        roi_scale: side of the square as a fraction of the shorter in-plane side, in (0, 1].
        plane_axes: the two spatial axes (channel excluded) of the plane, e.g. ``(0, 1)`` for (H, W, D).
        lazy: a flag to indicate whether this transform should execute lazily or not.

    Raises:
        ValueError: ``roi_scale`` outside (0, 1] or ``plane_axes`` not two distinct axes.
    """

    def __init__(self, roi_scale: float, plane_axes: Sequence[int] = (0, 1), lazy: bool = False):
        super().__init__(lazy=lazy)
        if not 0.0 < roi_scale <= 1.0:
            raise ValueError(f"roi_scale must be in (0, 1], got {roi_scale!r}.")
        if len(plane_axes) != 2 or plane_axes[0] == plane_axes[1]:
            raise ValueError(f"plane_axes must be two distinct spatial axes, got {plane_axes!r}.")
        self.roi_scale = roi_scale
        self.plane_axes = tuple(plane_axes)

    def roi_size(self, img_size: Sequence[int]) -> list[int]:
        """The crop's size for an image of spatial size ``img_size``."""
        axes = [a % len(img_size) for a in self.plane_axes]
        side = ceil(self.roi_scale * min(img_size[a] for a in axes))
        return [side if a in axes else size for a, size in enumerate(img_size)]

    def __call__(self, img: torch.Tensor, lazy: bool | None = None) -> torch.Tensor:  # type: ignore[override]
        img_size = img.peek_pending_shape() if isinstance(img, MetaTensor) else img.shape[1:]
        lazy_ = self.lazy if lazy is None else lazy
        cropper = CenterSpatialCrop(roi_size=self.roi_size(img_size), lazy=lazy_)
        return super().__call__(img=img, slices=cropper.compute_slices(img_size), lazy=lazy_)


class CenterSquareCropd(Cropd):
    """
    Dictionary-based wrapper of :class:`CenterSquareCrop`; every key must have the same spatial shape (image and
    label of one volume).

    Args:
        keys: keys of the items to crop.
        roi_scale, plane_axes, lazy: as in :class:`CenterSquareCrop`.
        allow_missing_keys: don't raise an exception if a key is missing.
    """

    def __init__(
        self,
        keys: KeysCollection,
        roi_scale: float,
        plane_axes: Sequence[int] = (0, 1),
        allow_missing_keys: bool = False,
        lazy: bool = False,
    ) -> None:
        cropper = CenterSquareCrop(roi_scale, plane_axes=plane_axes, lazy=lazy)
        super().__init__(keys, cropper=cropper, allow_missing_keys=allow_missing_keys, lazy=lazy)


def field_of_view_crop(
    keys: KeysCollection,
    fov_scale: float,
    fov_shape: str = "scaled",
    slice_axis: int = -1,
    allow_missing_keys: bool = False,
) -> CenterScaleCropd | CenterSquareCropd | Identityd:
    """
    The in-plane field-of-view crop of a channel-first 3D volume, as the bundles configure it.

    Args:
        keys: keys of the volumes (image and label of one volume).
        fov_scale: with ``"scaled"``, the fraction of each in-plane axis kept (1: no crop, ``Identityd``); with
            ``"square"``, the side of the square as a fraction of the shorter in-plane side.
        fov_shape: one of :data:`FOV_SHAPES`.
        slice_axis: the spatial axis across the slices (the other two form the plane).
        allow_missing_keys: skip a key the data lacks (one pipeline for labelled and unlabelled volumes).

    Raises:
        ValueError: ``fov_scale`` outside (0, 1] or an unknown ``fov_shape``.
    """
    if not 0.0 < fov_scale <= 1.0:
        raise ValueError(f"fov_scale must be in (0, 1], got {fov_scale!r}.")
    if fov_shape not in FOV_SHAPES:
        raise ValueError(f"fov_shape must be one of {FOV_SHAPES}, got {fov_shape!r}.")
    plane_axes = [a for a in range(3) if a != slice_axis % 3]
    if fov_shape == "square":
        return CenterSquareCropd(
            keys=keys, roi_scale=fov_scale, plane_axes=plane_axes, allow_missing_keys=allow_missing_keys
        )
    if fov_scale == 1.0:
        return Identityd(keys=keys, allow_missing_keys=allow_missing_keys)
    roi_scale = [fov_scale if a in plane_axes else 1.0 for a in range(3)]
    return CenterScaleCropd(keys=keys, roi_scale=roi_scale, allow_missing_keys=allow_missing_keys)
