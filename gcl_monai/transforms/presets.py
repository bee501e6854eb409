"""
The standard GCL transform pipelines as Python factories, for the Python API. The bundle configs list the same steps
one by one with ``_target_`` (so that one override changes one step); ``tests/bundles/test_bundle_idiom.py`` checks
that both compute the same slices and draw the same views and augmentations.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from monai.config import KeysCollection
from monai.transforms import (
    Compose,
    CopyItemsd,
    EnsureChannelFirstd,
    EnsureTyped,
    MapLabelValued,
    MapTransform,
    NormalizeIntensityd,
    RandAdjustContrastd,
    RandAffined,
    RandFlipd,
    RandScaleIntensityd,
    RandStdShiftIntensityd,
    Resized,
    ScaleIntensityRangePercentilesd,
)
from monai.utils import MAX_SEED, ensure_tuple_rep

from gcl_monai.transforms.field_of_view import field_of_view_crop
from gcl_monai.transforms.slicing import VolumeToSlicesd
from gcl_monai.transforms.views import ContrastiveViewsd, RandRelativeGaussianNoised
from gcl_monai.transforms.volume_loading import LoadVolumed

__all__ = [
    "DICE_GRIDS",
    "PRED_INTERPS",
    "dice_grid_steps",
    "SelectChanneld",
    "volume_transforms",
    "volume_eval_transforms",
    "pretrain_transforms",
    "finetune_transforms",
    "eval_transforms",
]

INTENSITY_MODES = ("percentile", "zscore", None)


class SelectChanneld(MapTransform):
    """
    Keep one channel of a channel-first image when the item names it (e.g. T2 = channel 0 of MSD prostate).

    Items without ``channel_key`` pass unchanged, so one pipeline serves single- and multi-channel datasets.

    Args:
        keys: keys of the channel-first images to select from.
        channel_key: key of the item that holds the channel index.
        allow_missing_keys: do not raise when a key is missing.

    Raises:
        IndexError: the channel index is out of range (the message names the file).
    """

    def __init__(self, keys: KeysCollection = "image", channel_key: str = "channel", allow_missing_keys: bool = False):
        super().__init__(keys, allow_missing_keys)
        self.channel_key = channel_key

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        """
        Args:
            data: a dictionary with channel-first images, optionally with an integer under ``channel_key``.

        Returns:
            a copy of ``data`` whose images keep only the named channel (still channel-first).
        """
        d = dict(data)
        if d.get(self.channel_key) is None:
            return d
        channel = int(d[self.channel_key])
        for key in self.key_iterator(d):
            num_channels = d[key].shape[0]
            if not -num_channels <= channel < num_channels:
                name = getattr(d[key], "meta", {}).get("filename_or_obj", "<unknown file>")
                raise IndexError(f"SelectChanneld: channel {channel} out of range: {name} has {num_channels} channels.")
            d[key] = d[key][[channel]]
        return d


def _label_map_lists(label_map: Mapping | Sequence) -> tuple[list[float], list[float]]:
    """``{orig: target}`` (keys may be strings, as in JSON) or ``[(orig, target), ...]`` -> two lists."""
    pairs = label_map.items() if isinstance(label_map, Mapping) else label_map
    orig, target = zip(*((float(o), float(t)) for o, t in pairs))
    return list(orig), list(target)


def _seeded(compose: Compose, seed: int | None) -> Compose:
    """Seed a random pipeline; with ``seed=None`` draw the seed from NumPy's global generator (``set_determinism``)."""
    return compose.set_random_state(seed=int(np.random.randint(MAX_SEED)) if seed is None else seed)


def _volume_steps(
    keys: tuple[str, ...],
    image_size: Sequence[int] | int,
    slice_axis: int,
    label_map: Mapping | Sequence | None,
    intensity: str | None,
    fov_scale: float,
    fov_shape: str,
    input_label_key: str | None = None,
) -> list:
    """
    Load, select the channel, remap labels (and copy the label to ``input_label_key``, in the volume's own grid),
    normalise intensities, crop and resize the volume in-plane.
    """
    if intensity not in INTENSITY_MODES:
        raise ValueError(f"intensity must be one of {INTENSITY_MODES}, got {intensity!r}.")
    steps: list = [LoadVolumed(keys=keys), EnsureChannelFirstd(keys=keys), SelectChanneld(keys="image")]
    if "label" in keys and label_map is not None:
        orig, target = _label_map_lists(label_map)
        steps.append(MapLabelValued(keys="label", orig_labels=orig, target_labels=target))
    if input_label_key is not None:
        if "label" not in keys:
            raise ValueError(f"input_label_key={input_label_key!r} needs the label (with_label=True).")
        steps.append(CopyItemsd(keys="label", names=input_label_key))
    if intensity == "percentile":
        steps.append(
            ScaleIntensityRangePercentilesd(
                keys="image", lower=1, upper=99, b_min=0.0, b_max=1.0, clip=True, channel_wise=True
            )
        )
    elif intensity == "zscore":
        steps.append(NormalizeIntensityd(keys="image", channel_wise=True))
    spatial_size = list(ensure_tuple_rep(image_size, 2))
    spatial_size.insert(slice_axis % (len(spatial_size) + 1), -1)
    steps.append(field_of_view_crop(keys, fov_scale, fov_shape, slice_axis))
    steps.append(
        Resized(
            keys=keys,
            spatial_size=spatial_size,
            mode=("area", "nearest")[: len(keys)],
        )
    )
    return steps


def volume_transforms(
    image_size: Sequence[int] | int = (128, 128),
    slice_axis: int = -1,
    meta_keys: Sequence[str] | str | None = ("patient_id", "organ_state"),
    with_label: bool = True,
    label_map: Mapping | Sequence | None = None,
    intensity: str | None = "percentile",
    num_quantiles: int = 4,
    fov_scale: float = 1.0,
    fov_shape: str = "scaled",
) -> Compose:
    """
    Deterministic per-volume pipeline: load a volume, normalise it, and cut it into fixed-size 2D slices.

    Steps (keys ``"image"`` and, with ``with_label``, ``"label"``):

    1. :class:`LoadVolumed` (``LoadImaged`` with the reader chosen by suffix: :class:`H5Reader` for
       ``.h5#dataset``, ``NibabelReader`` for NIfTI; a DICOM archive is converted to NIfTI first, see
       ``docs/dicom.md``);
    2. ``EnsureChannelFirstd``; :class:`SelectChanneld` when the item has ``"channel"``;
    3. ``MapLabelValued`` when ``label_map`` is given (e.g. MM-WHS ``{205: 1, 420: 2, ..., 850: 7}``);
    4. per-volume intensity normalisation of the image: ``"percentile"``: percentiles 1-99 -> [0, 1], clipped
       (``ScaleIntensityRangePercentilesd``); ``"zscore"``: ``NormalizeIntensityd``; None: none;
    5. the in-plane field of view, centred (the organ sits in the centre of the field of view of cardiac and
       prostate MRI: the bundles' ``fov_scale`` is the smallest that keeps every label voxel of the non-test
       volumes, see ``docs/finetuning.md``): with ``fov_shape="scaled"`` and ``fov_scale < 1``,
       ``CenterScaleCropd`` of the central ``fov_scale`` of each in-plane axis (a non-square slice is then
       stretched by the resize); with ``fov_shape="square"``, :class:`CenterSquareCropd` of a square of side
       ``fov_scale`` times the shorter in-plane side (the aspect ratio kept); then ``Resized`` of the volume to
       ``image_size`` in-plane, keeping the number of slices (area averaging for the image, nearest for the
       label). Both are invertible MONAI steps: the inference bundle applies the same two to a 3D volume and
       ``Invertd`` pads and resizes its prediction back to the input grid;
    6. :class:`VolumeToSlicesd` (a list of slice dictionaries with the meta labels).

    The pipeline returns a list of slice dictionaries per volume: use it as ``SliceDataset``'s
    ``volume_transform``. :func:`volume_eval_transforms` is the same without step 6, for 3D evaluation.

    Args:
        image_size: in-plane size of the slices (an int for a square).
        slice_axis: spatial axis to slice along (-1: last, the short axis / z of ACDC, prostate, MM-WHS).
        meta_keys: integer meta labels of the datalist copied to every slice (``("patient_id",)`` when the
            dataset has no ``organ_state``).
        with_label: load and slice ``"label"`` too.
        label_map: label values to remap, ``{orig: target}`` (JSON string keys accepted) or pairs.
        intensity: ``"percentile"``, ``"zscore"`` or None.
        num_quantiles: number of ``Slice_quantile`` classes.
        fov_scale: fraction of each in-plane axis (``fov_shape="scaled"``) or of the shorter one (``"square"``)
            kept around the centre before resizing (1 and ``"scaled"``: the whole field of view).
        fov_shape: ``"scaled"`` or ``"square"`` (step 5).

    Returns:
        the ``Compose``.

    Raises:
        ValueError: unknown ``intensity`` or ``fov_shape``, or ``fov_scale`` outside (0, 1].
    """
    keys = ("image", "label") if with_label else ("image",)
    steps = _volume_steps(keys, image_size, slice_axis, label_map, intensity, fov_scale, fov_shape)
    steps.append(VolumeToSlicesd(keys=keys, meta_keys=meta_keys, num_quantiles=num_quantiles, slice_axis=slice_axis))
    return Compose(steps)


def volume_eval_transforms(
    image_size: Sequence[int] | int = (128, 128),
    slice_axis: int = -1,
    with_label: bool = True,
    label_map: Mapping | Sequence | None = None,
    intensity: str | None = "percentile",
    fov_scale: float = 1.0,
    fov_shape: str = "scaled",
    input_label_key: str | None = None,
) -> Compose:
    """
    Deterministic 3D pipeline for evaluation with ``monai.inferers.SliceInferer``: steps 1-5 of
    :func:`volume_transforms` (no slicing), so the network sees exactly the slices it was trained on.

    Args:
        image_size, slice_axis, with_label, label_map, intensity, fov_scale, fov_shape: as in
            :func:`volume_transforms`.
        input_label_key: also keep the label, as loaded (labels remapped), under this key: the reference of a Dice
            in the volume's own grid (the prediction inverted with ``Invertd``), which neither the crop nor the
            resize touch.

    Raises:
        ValueError: as :func:`volume_transforms`; ``input_label_key`` without the label.
    """
    keys = ("image", "label") if with_label else ("image",)
    steps = _volume_steps(keys, image_size, slice_axis, label_map, intensity, fov_scale, fov_shape, input_label_key)
    return Compose(steps)


#: how a prediction goes back from the network's grid to the volume's own (``Invertd``, the evaluation's
#: ``dice_grid`` ``input`` and the inference bundle): ``"nearest"``, the label map (argmax, then the largest
#: component) resampled by nearest neighbour; ``"bilinear"``, the class probabilities (softmax) resampled
#: bilinearly, then the argmax and the largest component on the volume's grid (how nnU-Net exports: Isensee et al.,
#: Nature Methods 2021), which does not draw the network's pixels as steps on a finer grid
PRED_INTERPS = ("nearest", "bilinear")

#: where the evaluation bundle computes Dice: ``"network"``, the cropped and resized grid the network sees;
#: ``"input"``, the volume's own grid (the prediction inverted through the crop and the resize, the label as loaded)
DICE_GRIDS = ("network", "input")


def dice_grid_steps(dice_grid: str, **steps: Sequence) -> list:
    """
    The evaluation bundle's post-processing steps for ``dice_grid`` (one of :data:`DICE_GRIDS`), given the steps
    of each grid by name.

    Raises:
        ValueError: ``dice_grid`` is not one of :data:`DICE_GRIDS`, or its steps are not given.
    """
    if dice_grid not in DICE_GRIDS or dice_grid not in steps:
        raise ValueError(f"dice_grid must be one of {DICE_GRIDS}, got {dice_grid!r}.")
    return list(steps[dice_grid])


def pretrain_transforms(
    image_size: Sequence[int] | int = (128, 128),
    view_keys: Sequence[str] = ("image", "image_2"),
    track_meta: bool = False,
    seed: int | None = None,
    views: bool = True,
    **view_kwargs: Any,
) -> Compose:
    """
    Random per-slice pipeline for contrastive pre-training: two views of ``"image"``.

    With ``views=False`` the pipeline only converts the types and the slice passes un-augmented (it already has
    ``image_size`` from :func:`volume_transforms`): the views are then drawn for the whole batch on the device by
    :class:`gcl_monai.transforms.BatchContrastiveViews` (``device_views`` of
    :py:class:`gcl_monai.engines.GCLPretrainer`, the bundles' ``views_on_device``).

    Args:
        image_size: in-plane size of the views.
        view_keys: output keys of the views (``"image"`` is replaced by the first view by default).
        track_meta: keep ``MetaTensor`` outputs; False (default) returns plain tensors, cheaper to collate.
        seed: seed of the random state; None draws it from NumPy's global generator, so that
            ``monai.utils.set_determinism`` before this call makes runs reproducible.
        views: draw the views here (:class:`ContrastiveViewsd`); False leaves the slice un-augmented.
        view_kwargs: augmentation strengths passed to :class:`ContrastiveViewsd` (e.g. ``rotate_degrees``).

    Returns:
        the ``Compose``.
    """
    if not views:
        return Compose([EnsureTyped(keys=("image", "label"), track_meta=track_meta, allow_missing_keys=True)])
    size = ensure_tuple_rep(image_size, 2)
    compose = Compose(
        [
            ContrastiveViewsd(keys="image", view_keys=view_keys, spatial_size=size, **view_kwargs),
            EnsureTyped(keys=(*view_keys, "label"), track_meta=track_meta, allow_missing_keys=True),
        ]
    )
    return _seeded(compose, seed)


def finetune_transforms(
    image_size: Sequence[int] | int = (128, 128),
    flip_prob: float = 0.5,
    rotate_degrees: float = 15.0,
    scale_range: float = 0.1,
    affine_prob: float = 0.5,
    intensity_prob: float = 0.3,
    track_meta: bool = False,
    seed: int | None = None,
    with_label: bool = True,
    device: str | torch.device | None = None,
) -> Compose:
    """
    Random per-slice pipeline for supervised fine-tuning on ``"image"`` and ``"label"`` (``"image"`` only with
    ``with_label=False``: the unlabelled slices of semi-supervised fine-tuning).

    Flips and a small affine (rotation, isotropic-ish scaling) are applied jointly to image and label
    (bilinear / nearest, zero padding); gamma, relative scaling, std-relative shift and noise to the image.

    Args:
        image_size: in-plane size of the output (the affine resamples to it).
        flip_prob: probability of a flip along each spatial axis.
        rotate_degrees: largest rotation, in degrees.
        scale_range: largest relative zoom of the affine.
        affine_prob: probability of the affine.
        intensity_prob: probability of each intensity change.
        track_meta: keep ``MetaTensor`` outputs; False (default) returns plain tensors.
        seed: seed of the random state; None draws it from NumPy's global generator.
        with_label: transform ``"label"`` with the image.
        device: where ``RandAffined`` builds its grid and resamples (None: the CPU); the other transforms run on
            the slices' device. Slices kept on a GPU (:py:class:`gcl_monai.data.DeviceSliceBatches`) are then
            augmented there.

    Returns:
        the ``Compose``.
    """
    size = ensure_tuple_rep(image_size, 2)
    keys = ("image", "label") if with_label else ("image",)
    compose = Compose(
        [
            *[RandFlipd(keys=keys, prob=flip_prob, spatial_axis=axis) for axis in range(len(size))],
            RandAffined(
                keys=keys,
                spatial_size=size,
                prob=affine_prob,
                rotate_range=math.radians(rotate_degrees),
                scale_range=(scale_range,) * len(size),
                mode=("bilinear", "nearest")[: len(keys)],
                padding_mode="zeros",
                cache_grid=True,
                device=device,
            ),
            RandAdjustContrastd(keys="image", prob=intensity_prob, gamma=(0.8, 1.25)),
            RandScaleIntensityd(keys="image", factors=0.1, prob=intensity_prob),
            RandStdShiftIntensityd(keys="image", factors=0.1, prob=intensity_prob),
            RandRelativeGaussianNoised(keys="image", prob=intensity_prob, std_fraction=0.05),
            EnsureTyped(keys=keys, track_meta=track_meta),
        ]
    )
    return _seeded(compose, seed)


def eval_transforms(keys: KeysCollection = ("image", "label"), track_meta: bool = True) -> Compose:
    """
    Per-slice pipeline for evaluation: nothing random, only type conversion.

    Args:
        keys: keys to convert (missing ones are skipped, e.g. unlabelled data).
        track_meta: keep ``MetaTensor`` outputs (default True, e.g. to save predictions with their affine).

    Returns:
        the ``Compose``.
    """
    return Compose([EnsureTyped(keys=keys, track_meta=track_meta, allow_missing_keys=True)])
