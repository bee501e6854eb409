"""Dimensional collapse of an encoder's weights: the effective rank of each convolution."""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["effective_rank", "encoder_weight_ranks"]


def effective_rank(weight: torch.Tensor) -> float:
    """
    Effective rank (Roy & Vetterli, EUSIPCO 2007) of a weight seen as a matrix ``(out, in * kernel)``:
    :math:`\\exp(-\\sum_i p_i \\log p_i)` with :math:`p_i = \\sigma_i^2 / \\sum_j \\sigma_j^2` its normalised squared
    singular values. It is between 1 (one direction carries all the weight) and ``min(out, in * kernel)`` (equal
    singular values); a freshly initialised convolution is close to the maximum.

    Raises:
        ValueError: an all-zero weight (no direction at all) or a non-finite one.
    """
    matrix = weight.detach().flatten(1).double().cpu()
    if not torch.isfinite(matrix).all():
        raise ValueError("effective_rank of a weight with non-finite entries.")
    power = torch.linalg.svdvals(matrix).square()
    if power.sum() == 0:
        raise ValueError("effective_rank of an all-zero weight.")
    p = power / power.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def encoder_weight_ranks(state_dict: Mapping[str, torch.Tensor]) -> dict[str, tuple[float, int]]:
    """
    ``{name: (effective rank, maximum rank)}`` of every convolution weight (4D or more) of a state dict, e.g. the
    ``encoder.pt`` a pre-training exports: contrastive pre-training can leave the deepest layers with a small
    fraction of the rank they started with (docs/recipe.md), which the fine-tuning then inherits.
    """
    return {
        name: (effective_rank(value), min(value.shape[0], value[0].numel()))
        for name, value in state_dict.items()
        if name.endswith("weight") and value.ndim >= 4
    }
