"""
Algorithm 1 of GCL (Wu et al., ACM MM 2023), written as the paper states it: a Python loop over the parameters, the
meta labels ``i`` and the other meta labels ``j``. It is the update of Gradient Vaccine (GradVac, Wang et al., ICLR
2021) applied between meta labels. This reference is slow and not for training: the tests check
:py:class:`gcl_monai.gradients.GradMitigator` (the vectorised implementation) against it, and
``benchmarks/bench_grad_mitigator.py`` times it as the baseline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["algorithm1"]


@torch.no_grad()
def algorithm1(
    grads: Sequence[Sequence[torch.Tensor]],
    targets: torch.Tensor,
    beta: float = 0.01,
    granularity: str = "parameter",
    eps: float = 1e-12,
    min_target: float | None = None,
) -> list[torch.Tensor]:
    """
    One step of Algorithm 1: for every parameter ``p`` and meta label ``i``, ``g'_i`` starts at ``g_i`` and meets every
    other ``g_j`` in increasing ``j``: ``w = cos(g'_i, g_j)``; ``t_ij <- (1 - beta) t_ij + beta w`` (Eq. 4); if
    ``w < t_ij``, ``g'_i <- g'_i + |g'_i| (t sqrt(1 - w^2) - w sqrt(1 - t^2)) / (|g_j| sqrt(1 - t^2)) g_j`` (Eq. 3).
    Returns ``(1/M) sum_i g'_i``. Pairs with a norm ``<= eps`` are skipped; ``t`` is clamped to ``[-1 + 1e-6,
    1 - 1e-6]`` (and raised to ``min_target`` if given) before Eq. 3, as in ``GradMitigator``.

    Args:
        grads: ``M`` lists of per-parameter gradients (computed in their own dtype).
        targets: the ``(M, M, P)`` EMA targets (``P = 1`` for ``"global"``), updated in place.
        granularity: ``"parameter"`` (each tensor on its own) or ``"global"`` (all concatenated).
    """
    flat = [[g.flatten() for g in task] for task in grads]
    vectors = [[torch.cat(task)] for task in flat] if granularity == "global" else flat
    combined = []
    for p in range(len(vectors[0])):
        total = torch.zeros_like(vectors[0][p])
        for i in range(len(grads)):
            g_i = vectors[i][p].clone()
            for j in range(len(grads)):
                g_j = vectors[j][p]
                n_i, n_j = float(g_i.norm()), float(g_j.norm())
                if j == i or n_i <= eps or n_j <= eps:
                    continue
                w = min(max(float(g_i @ g_j) / (n_i * n_j), -1.0), 1.0)
                targets[i, j, p] = (1 - beta) * float(targets[i, j, p]) + beta * w
                t = float(targets[i, j, p]) if min_target is None else max(float(targets[i, j, p]), min_target)
                t = min(max(t, -1 + 1e-6), 1 - 1e-6)
                if w < t:
                    g_i = (
                        g_i
                        + n_i
                        * (t * math.sqrt(1 - w * w) - w * math.sqrt(1 - t * t))
                        / (n_j * math.sqrt(1 - t * t))
                        * g_j
                    )
            total += g_i / len(grads)
        combined.append(total)
    pieces = combined[0].split([g.numel() for g in grads[0]]) if granularity == "global" else combined
    return [c.view_as(g) for c, g in zip(pieces, grads[0])]
