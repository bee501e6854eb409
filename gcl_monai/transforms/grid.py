"""
The in-plane pixel grid a 2D network sees: the field of view resized to a fixed size (the bundles' default), the
data's own pixels, or a physical spacing, each cropped or padded to ``spatial_size``.

The resize stretches each axis by its own factor (ACDC: about 2.1-2.5 mm per pixel at 128 x 128 after the central
0.8, anisotropic where the slice is not square); the literature's cardiac baselines resample to a fixed spacing (GLCL,
Chaitanya et al. NeurIPS 2020: 1.367 mm, 192 x 192 crops). All three are MONAI transforms, inverted by ``Invertd``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from monai.config import KeysCollection
from monai.transforms import Compose, MapTransform, Resized, ResizeWithPadOrCropd, Spacingd
from monai.utils import ensure_tuple, ensure_tuple_rep

__all__ = ["GRIDS", "in_plane_grid", "RequireSpacingd"]

#: ``"resize"``: the volume's field of view resized to ``spatial_size`` (``Resized``); ``"native"``: the data's own
#: pixels, the central ``spatial_size`` kept or padded (``ResizeWithPadOrCropd``); ``"spacing"``: resampled to
#: ``pixel_spacing`` mm in-plane (``Spacingd``, the slice spacing kept), then cropped or padded to ``spatial_size``
GRIDS = ("resize", "native", "spacing")


class RequireSpacingd(MapTransform):
    """Refuses, naming the file, a volume whose layout carries no voxel spacing (the HDF5 layout: the reader marks
    its items with ``h5_dataset`` and an identity affine), where a physical spacing is asked for."""

    def __call__(self, data: Mapping[Hashable, object]) -> dict:
        d = dict(data)
        for key in self.key_iterator(d):
            meta = getattr(d[key], "meta", {})
            if "h5_dataset" in meta:
                raise ValueError(
                    f"grid 'spacing' needs the voxel spacing, but {meta.get('filename_or_obj', key)} (HDF5 layout) "
                    "carries none: use grid 'native' (the data's own pixels) or 'resize'."
                )
        return d


def in_plane_grid(
    keys: KeysCollection,
    grid: str,
    spatial_size: Sequence[int],
    mode: Sequence[str] | str = "area",
    pixel_spacing: float = 1.4,
    allow_missing_keys: bool = False,
) -> Resized | ResizeWithPadOrCropd | Compose:
    """
    The transform that puts a channel-first ``(C, H, W, D)`` volume on the network's in-plane grid (``D``, the slice
    axis, kept), as the bundles configure it.

    Args:
        keys: keys of the volume (image and label).
        grid: one of :data:`GRIDS`.
        spatial_size: the in-plane size ``(H, W)``.
        mode: interpolation per key for ``"resize"`` (``Resized``'s: "area" for images, "nearest" for labels); for
            ``"spacing"`` an "area" becomes "bilinear" (``Spacingd`` resamples with a grid).
        pixel_spacing: the in-plane spacing in mm of ``"spacing"``.
        allow_missing_keys: skip a key the data lacks (one pipeline for labelled and unlabelled volumes).

    Raises:
        ValueError: an unknown ``grid`` or a ``spatial_size`` that is not two positive sizes.
    """
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {GRIDS}, got {grid!r}.")
    if len(spatial_size) != 2 or min(spatial_size) < 1:
        raise ValueError(f"spatial_size must be two in-plane sizes, got {spatial_size!r}.")
    size = [int(s) for s in spatial_size] + [-1]
    if grid == "resize":
        return Resized(keys, spatial_size=size, mode=mode, allow_missing_keys=allow_missing_keys)
    crop = ResizeWithPadOrCropd(keys, spatial_size=size, allow_missing_keys=allow_missing_keys)
    if grid == "native":
        return crop
    modes = ["bilinear" if m == "area" else m for m in ensure_tuple_rep(mode, len(ensure_tuple(keys)))]
    spacing = Spacingd(
        keys, pixdim=[pixel_spacing, pixel_spacing, -1], mode=modes, allow_missing_keys=allow_missing_keys
    )
    return Compose([RequireSpacingd(keys, allow_missing_keys), spacing, crop])
