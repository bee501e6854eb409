"""Clean-up of a predicted label map: the largest 3D connected component, of each class or of the whole foreground."""

from __future__ import annotations

from monai.config import KeysCollection
from monai.transforms import Identityd, KeepLargestConnectedComponentd, MapTransform

__all__ = ["LARGEST_COMPONENT_MODES", "keep_largest_component"]

#: ``"class"``: each foreground class keeps its own largest component; ``"foreground"``: the largest component of
#: all foreground classes together is kept (classes touching it stay whole, detached islands go)
LARGEST_COMPONENT_MODES = ("class", "foreground")


def keep_largest_component(mode: str | bool | None, num_classes: int, keys: KeysCollection = "pred") -> MapTransform:
    """
    The post-processing step of the bundles' ``keep_largest_component`` switch, applied to an argmax label map
    (one channel, values ``0 .. num_classes - 1``, 0 the background) of a whole volume, so components connect
    across slices. Removed voxels become background.

    Args:
        mode: False or None (no clean-up: an identity step; ``--keep_largest_component False`` on the command line,
            which drops ``None`` overrides) or one of :data:`LARGEST_COMPONENT_MODES`.
        num_classes: number of classes including the background.
        keys: keys of the label maps.

    Raises:
        ValueError: ``mode`` is not False, None or one of :data:`LARGEST_COMPONENT_MODES`; ``num_classes`` below 2.
    """
    if mode is None or mode is False:
        return Identityd(keys=keys)
    if mode not in LARGEST_COMPONENT_MODES:
        raise ValueError(
            f"keep_largest_component must be False, None or one of {LARGEST_COMPONENT_MODES}, got {mode!r}."
        )
    if num_classes < 2:
        raise ValueError(f"keep_largest_component needs a foreground class, got num_classes={num_classes}.")
    return KeepLargestConnectedComponentd(
        keys=keys, applied_labels=list(range(1, num_classes)), is_onehot=False, independent=mode == "class"
    )
