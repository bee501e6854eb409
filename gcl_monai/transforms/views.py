"""Two-view (or n-view) random augmentation of a 2D slice for contrastive pre-training."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from monai.config import KeysCollection
from monai.transforms import (
    Compose,
    MapTransform,
    RandAdjustContrastd,
    RandFlipd,
    RandGaussianSmoothd,
    Randomizable,
    RandomizableTransform,
    RandRotated,
    RandScaleCropd,
    RandScaleIntensityd,
    RandStdShiftIntensityd,
    Resized,
)
from monai.utils import MAX_SEED, ensure_tuple, ensure_tuple_rep

from gcl_monai.transforms.view_strengths import ViewStrengths

__all__ = ["ContrastiveViewsd", "RandRelativeGaussianNoised"]


class RandRelativeGaussianNoised(RandomizableTransform, MapTransform):
    """
    Add zero-mean Gaussian noise whose standard deviation is a random fraction of the image's own.

    The noise std is ``f * std(image)`` with ``f ~ U(0, std_fraction)`` drawn once per call, and ``std(image)``
    computed per channel. Unlike ``RandGaussianNoised`` (absolute std), the strength does not depend on the
    intensity scale: dark MR slices (ACDC: mean and std ~0.08 in [0, 1]) are not swamped by the noise.

    Args:
        keys: keys of the images to corrupt (each gets its own noise sample).
        prob: probability of adding noise.
        std_fraction: largest noise std, as a fraction of the image's std.
        allow_missing_keys: do not raise when a key is missing.
    """

    def __init__(
        self, keys: KeysCollection, prob: float = 0.5, std_fraction: float = 0.1, allow_missing_keys: bool = False
    ) -> None:
        MapTransform.__init__(self, keys, allow_missing_keys)
        RandomizableTransform.__init__(self, prob)
        if std_fraction < 0:
            raise ValueError(f"std_fraction must be >= 0, got {std_fraction}.")
        self.std_fraction = std_fraction
        self._fraction = 0.0

    def randomize(self, data: Any = None) -> None:
        """Decide whether to add noise and draw its relative strength."""
        super().randomize(None)
        if self._do_transform:
            self._fraction = float(self.R.uniform(0.0, self.std_fraction))

    def __call__(self, data: Mapping[Hashable, torch.Tensor]) -> dict[Hashable, torch.Tensor]:
        """
        Args:
            data: dictionary of channel-first images.

        Returns:
            a copy of ``data`` with noise added to the images of ``keys``.
        """
        d = dict(data)
        self.randomize()
        if not self._do_transform:
            return d
        for key in self.key_iterator(d):
            img = torch.as_tensor(d[key])
            scale = img.reshape(img.shape[0], -1).float().std(dim=1) * self._fraction
            noise = torch.as_tensor(self.R.standard_normal(size=tuple(img.shape)), dtype=img.dtype, device=img.device)
            d[key] = d[key] + noise * scale.to(img.dtype).reshape((-1,) + (1,) * (img.ndim - 1))
        return d


class ContrastiveViewsd(Randomizable, MapTransform):
    """
    Produce independently augmented views of one 2D slice ``(C, H, W)`` for contrastive learning.

    Each view is a ``Compose`` of MONAI random transforms, applied in this order, with the strengths of
    :class:`gcl_monai.transforms.ViewStrengths`:

    1. random resized crop: ``RandScaleCropd`` with each side a random fraction in ``crop_scale`` of the
       slice's side (random centre, so the aspect ratio varies too), then ``Resized`` to ``spatial_size``;
    2. ``RandFlipd`` along each spatial axis with probability ``flip_prob``;
    3. ``RandRotated`` by up to +-``rotate_degrees`` (zero padding, i.e. background after [0, 1] scaling);
    4. intensity, all relative to the slice's own scale (normalise the volume first, e.g. percentiles
       1-99 -> [0, 1]): ``RandAdjustContrastd`` gamma in ``gamma`` (applied on the slice's min-max range),
       ``RandScaleIntensityd`` ``x (1 + f)``, ``f ~ U(-scale_factor, scale_factor)``, and
       ``RandStdShiftIntensityd`` ``+ f * std``, ``f ~ U(-shift_factor, shift_factor)``;
    5. :class:`RandRelativeGaussianNoised`: noise of std up to ``noise_std_fraction * std``;
    6. ``RandGaussianSmoothd``: blur with sigma in ``blur_sigma`` pixels (at ``spatial_size``).

    Randomness: each view owns its random state, seeded from this transform's ``R`` by
    ``set_random_state``. When ``seed`` is None the constructor draws one from NumPy's global generator, so
    ``monai.utils.set_determinism(seed)`` before building the transform makes runs reproducible; MONAI's
    ``DataLoader`` also re-seeds it (``set_rnd``) from torch's generator.

    Args:
        keys: the key of the slice to augment (exactly one).
        view_keys: output key of each view (two or more); the first may equal ``keys`` to replace the slice.
        spatial_size: in-plane size of the views (an int for a square).
        seed: seed of the random state; None draws one from NumPy's global generator.
        allow_missing_keys: do not raise when the key is missing.
        strengths: the fields of :class:`gcl_monai.transforms.ViewStrengths` (e.g. ``rotate_degrees=30``); the
            others keep their defaults.

    Raises:
        ValueError: not exactly one key, fewer than two view keys, or an invalid strength (see ``ViewStrengths``).
        TypeError: a keyword that is not a field of ``ViewStrengths``.
    """

    def __init__(
        self,
        keys: KeysCollection = "image",
        view_keys: Sequence[str] = ("image", "image_2"),
        spatial_size: Sequence[int] | int = (128, 128),
        seed: int | None = None,
        allow_missing_keys: bool = False,
        **strengths: Any,
    ) -> None:
        MapTransform.__init__(self, keys, allow_missing_keys)
        if len(self.keys) != 1:
            raise ValueError(f"ContrastiveViewsd augments exactly one key, got {self.keys}.")
        self.view_keys = ensure_tuple(view_keys)
        if len(self.view_keys) < 2:
            raise ValueError(f"ContrastiveViewsd needs at least two view keys, got {self.view_keys}.")
        self.strengths = s = ViewStrengths(**strengths)
        key = self.keys[0]
        spatial_size = ensure_tuple_rep(spatial_size, 2)
        self.views = [
            Compose(
                [
                    RandScaleCropd(key, roi_scale=s.crop_scale[0], max_roi_scale=s.crop_scale[1], random_size=True),
                    Resized(key, spatial_size=spatial_size, mode="bilinear", anti_aliasing=True),
                    *[RandFlipd(key, prob=s.flip_prob, spatial_axis=axis) for axis in range(len(spatial_size))],
                    RandRotated(key, range_x=math.radians(s.rotate_degrees), prob=s.rotate_prob, padding_mode="zeros"),
                    RandAdjustContrastd(key, prob=s.gamma_prob, gamma=s.gamma),
                    RandScaleIntensityd(key, factors=s.scale_factor, prob=s.scale_prob),
                    RandStdShiftIntensityd(key, factors=s.shift_factor, prob=s.shift_prob),
                    RandRelativeGaussianNoised(key, prob=s.noise_prob, std_fraction=s.noise_std_fraction),
                    RandGaussianSmoothd(key, sigma_x=s.blur_sigma, sigma_y=s.blur_sigma, prob=s.blur_prob),
                ]
            )
            for _ in self.view_keys
        ]
        self.set_random_state(seed=int(np.random.randint(MAX_SEED)) if seed is None else seed)

    def set_random_state(
        self, seed: int | None = None, state: np.random.RandomState | None = None
    ) -> ContrastiveViewsd:
        """
        Set this transform's random state and re-seed every view from it.

        Args:
            seed: seed of the random state.
            state: a ``np.random.RandomState`` to use instead of a seed.

        Returns:
            this transform.
        """
        super().set_random_state(seed=seed, state=state)
        for view in self.views:
            view.set_random_state(seed=int(self.R.randint(MAX_SEED, dtype="uint32")))
        return self

    def __call__(self, data: Mapping[Hashable, Any]) -> dict[Hashable, Any]:
        """
        Args:
            data: a dictionary with a channel-first 2D slice under the key.

        Returns:
            a copy of ``data`` with one augmented view under each of ``view_keys``.
        """
        d = dict(data)
        for key in self.key_iterator(d):
            source = data[key]
            for view_key, view in zip(self.view_keys, self.views):
                d[view_key] = view({key: source})[key]
        return d
