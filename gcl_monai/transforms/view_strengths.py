"""The augmentation strengths of a contrastive view, one definition for the per-slice and the per-batch pipelines."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["ViewStrengths"]


@dataclass(frozen=True)
class ViewStrengths:
    """
    How strongly a contrastive view is augmented: the parameters shared by
    :class:`gcl_monai.transforms.ContrastiveViewsd` (MONAI transforms, one slice at a time) and
    :class:`gcl_monai.transforms.BatchContrastiveViews` (a whole batch on its device), so that both draw their views
    from one distribution. The defaults follow SimCLR's recipe (Chen et al., ICML 2020) softened for grey-level MR
    slices: no colour jitter, crops no smaller than half a side so that the heart or prostate is usually kept.

    Attributes:
        crop_scale: ``(min, max)`` fraction of each side kept by the random resized crop.
        flip_prob: probability of flipping along each spatial axis.
        rotate_degrees: largest rotation angle, in degrees.
        rotate_prob: probability of a rotation.
        gamma: range of the gamma (contrast) exponent.
        gamma_prob: probability of a gamma change.
        scale_factor: largest relative intensity scaling, ``x (1 + f)`` with ``f ~ U(-scale_factor, scale_factor)``.
        scale_prob: probability of intensity scaling.
        shift_factor: largest intensity shift, in units of the slice's std.
        shift_prob: probability of an intensity shift.
        noise_std_fraction: largest noise std, as a fraction of the slice's std.
        noise_prob: probability of noise.
        blur_sigma: ``(min, max)`` Gaussian blur sigma in pixels (at the views' size).
        blur_prob: probability of a blur.

    Raises:
        ValueError: ``crop_scale`` outside ``0 < min <= max <= 1``, a probability outside [0, 1], a negative
            factor, angle or noise fraction, a non-positive gamma or blur sigma, or a range given as ``(max, min)``;
            the message names the field and its value.
    """

    crop_scale: tuple[float, float] = (0.5, 1.0)
    flip_prob: float = 0.5
    rotate_degrees: float = 45.0
    rotate_prob: float = 0.5
    gamma: tuple[float, float] = (0.7, 1.5)
    gamma_prob: float = 0.5
    scale_factor: float = 0.2
    scale_prob: float = 0.5
    shift_factor: float = 0.2
    shift_prob: float = 0.5
    noise_std_fraction: float = 0.1
    noise_prob: float = 0.5
    blur_sigma: tuple[float, float] = (0.25, 1.0)
    blur_prob: float = 0.3

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in ("crop_scale", "gamma", "blur_sigma"):
                value = tuple(float(v) for v in value)
                if len(value) != 2 or not value[0] <= value[1]:
                    raise ValueError(f"{field.name} must be a range (min, max) with min <= max, got {value}.")
            else:
                value = float(value)
                if not math.isfinite(value) or value < 0:
                    raise ValueError(f"{field.name} must be finite and >= 0, got {value}.")
                if field.name.endswith("_prob") and value > 1:
                    raise ValueError(f"{field.name} is a probability, got {value}.")
            object.__setattr__(self, field.name, value)
        if not 0 < self.crop_scale[0] <= self.crop_scale[1] <= 1:
            raise ValueError(f"crop_scale must satisfy 0 < min <= max <= 1, got {self.crop_scale}.")
        for name in ("gamma", "blur_sigma"):
            if getattr(self, name)[0] <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}.")
