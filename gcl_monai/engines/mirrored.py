"""Test-time mirroring: a MONAI inferer that averages the network's output over mirror images of its input."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from monai.inferers import Inferer

__all__ = ["MirroredInferer"]


class MirroredInferer(Inferer):
    """
    Runs ``inferer`` on the input and on its mirror image along every non-empty subset of ``spatial_axes``, flips
    each output back, and returns the mean of the outputs: 2^n passes for n axes. This is the test-time mirroring
    of nnU-Net (Isensee et al., Nature Methods 2021), whose predictor averages the network's logits over the
    mirrored passes; the mean stays a logit map, so the post-processing after it (softmax, argmax, inversion) is
    unchanged. The bundles' training augmentation flips each slice along both in-plane axes (``RandFlipd``, p 0.5
    each), so a trained network has seen every one of these mirror images.

    Args:
        inferer: the inferer of one pass, e.g. ``SliceInferer`` (a 2D network applied slice by slice).
        spatial_axes: spatial axes to mirror, counted from 0 after batch and channel (``[0, 1]``: the two in-plane
            axes of an ``(H, W, D)`` volume whose slices run along the last axis). Empty: exactly ``inferer``,
            one pass.

    Raises:
        ValueError: an axis that is negative or repeated; at call, an axis the input does not have.
    """

    def __init__(self, inferer: Inferer, spatial_axes: Sequence[int] = ()) -> None:
        super().__init__()
        axes = tuple(int(axis) for axis in spatial_axes)
        if any(axis < 0 for axis in axes) or len(set(axes)) != len(axes):
            raise ValueError(f"MirroredInferer: spatial_axes must be distinct non-negative axes, got {list(axes)}.")
        self.inferer = inferer
        self.spatial_axes = axes

    def __call__(self, inputs: torch.Tensor, network: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        spatial_dims = inputs.ndim - 2
        if any(axis >= spatial_dims for axis in self.spatial_axes):
            raise ValueError(
                f"MirroredInferer: spatial_axes {list(self.spatial_axes)} for an input with {spatial_dims} spatial "
                f"axes (shape {tuple(inputs.shape)})."
            )
        total = self.inferer(inputs, network, *args, **kwargs)
        subsets = [
            s for r in range(1, len(self.spatial_axes) + 1) for s in itertools.combinations(self.spatial_axes, r)
        ]
        for subset in subsets:
            dims = [2 + axis for axis in subset]
            total = total + torch.flip(self.inferer(torch.flip(inputs, dims), network, *args, **kwargs), dims)
        return total / (len(subsets) + 1)
