"""Checks of an inference input before it reaches the network: one frame of a 4D series, finite intensities."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import torch
from monai.config import KeysCollection
from monai.transforms import MapTransform

__all__ = ["FRAME_KEY", "RepairNonFinited", "SelectFramed"]

logger = logging.getLogger("gcl_monai.transforms")

#: datalist key of the frame of a 4D series to segment (see :func:`gcl_monai.data.inference_datalist`).
FRAME_KEY = "frame"


def _source(image: Any) -> str:
    meta = getattr(image, "meta", {})
    return str(meta.get("filename_or_obj", "<image without file name>"))


class SelectFramed(MapTransform):
    """
    Keeps one frame of a 4D series (a cine MRI ``(H, W, D, T)`` loads channel-first as ``(T, H, W, D)``): the frame
    ``data["frame"]``, else ``frame``. The frame's file name becomes ``<name>_frameNN`` in the image's meta data,
    so the writer gives every frame its own output file. A single-channel volume passes unchanged.

    Args:
        keys: the image key(s), channel first.
        frame: the frame to keep when the item names none (None: an item without ``"frame"`` must be 3D).
        frame_key: the datalist key of an item's frame.
        allow_missing_keys: as in :py:class:`monai.transforms.MapTransform`.

    Raises:
        ValueError: for a multi-frame image with no frame chosen, or a frame out of range; the message names the
            file, its number of frames and the ``frame`` option.
    """

    def __init__(
        self,
        keys: KeysCollection,
        frame: int | None = None,
        frame_key: str = FRAME_KEY,
        allow_missing_keys: bool = False,
    ):
        super().__init__(keys, allow_missing_keys)
        self.frame = frame
        self.frame_key = frame_key

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        frame = d.get(self.frame_key, self.frame)
        for key in self.key_iterator(d):
            image = d[key]
            frames = image.shape[0]
            if frame is None:
                if frames > 1:
                    raise ValueError(
                        f"{_source(image)}: {frames} frames or channels (a 4D series?), but the network segments one "
                        "3D single-channel volume at a time. Segment every frame with the default datalist "
                        "(gcl_monai.data.inference_datalist lists each frame), or pick one with the 'frame' option, "
                        "e.g. --frame 0."
                    )
                continue
            frame = int(frame)
            if not 0 <= frame < frames:
                raise ValueError(f"{_source(image)}: frame {frame} requested, the image has {frames} frame(s).")
            if frames == 1:
                continue
            selected = image[frame : frame + 1]
            if hasattr(selected, "meta"):
                path = Path(_source(image))
                name = path.name
                suffix = next((s for s in (".nii.gz", ".nii") if name.lower().endswith(s)), path.suffix)
                stem = name[: len(name) - len(suffix)] if suffix else name
                selected.meta["filename_or_obj"] = str(path.with_name(f"{stem}_frame{frame:02d}{suffix}"))
            d[key] = selected
        return d


class RepairNonFinited(MapTransform):
    """
    Non-finite intensities (NaN, +-inf) would turn the percentile normalisation into NaN and the segmentation into
    silent background. A volume with some non-finite voxels is repaired: they take the volume's lowest finite
    value, with a warning naming the file and the count. A volume with no finite voxel is refused.

    Args:
        keys: the image key(s).
        allow_missing_keys: as in :py:class:`monai.transforms.MapTransform`.

    Raises:
        ValueError: for an image without a finite voxel, naming the file.
    """

    def __init__(self, keys: KeysCollection, allow_missing_keys: bool = False):
        super().__init__(keys, allow_missing_keys)

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        d = dict(data)
        for key in self.key_iterator(d):
            image = d[key]
            finite = torch.isfinite(torch.as_tensor(image))
            if bool(finite.all()):
                continue
            bad = int((~finite).sum())
            if not bool(finite.any()):
                raise ValueError(f"{_source(image)}: no finite intensity (all {bad} voxels are NaN or infinite).")
            fill = torch.as_tensor(image)[finite].min()
            logger.warning(
                "%s: %d of %d voxels are NaN or infinite; set to the lowest finite intensity %s.",
                _source(image),
                bad,
                finite.numel(),
                float(fill),
            )
            d[key] = torch.where(finite, image, fill)
        return d
