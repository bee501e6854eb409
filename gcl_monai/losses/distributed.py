"""Differentiable all-gather of the contrastive embeddings, so that negatives come from the batch of all ranks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ignite.distributed as idist
import torch
import torch.distributed as dist

__all__ = ["all_gather_with_grad", "gather_two_view_batch"]


class _AllGather(torch.autograd.Function):
    """Concatenation along dim 0 of every rank's tensor; see :py:func:`all_gather_with_grad`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.rank, ctx.rows = dist.get_rank(), x.shape[0]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad.narrow(0, ctx.rank * ctx.rows, ctx.rows)


def all_gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """
    Concatenates ``x`` of all ranks along dim 0 (rank 0's rows first), keeping the autograd graph: the backward
    sums the gradient that every rank computes for the concatenation (one all-reduce; gloo has no
    reduce-scatter) and returns the slice of this rank's rows.

    Scaling: if every rank computes the same loss ``L`` of the concatenation (as
    :py:class:`gcl_monai.engines.GCLPretrainer` does with ``gather_negatives=True``), the gradient with respect
    to this rank's rows is ``world_size * dL/dx_rank``, so the parameters' gradients AVERAGED over the ranks
    (as :py:func:`gcl_monai.engines.gradient_contract.all_reduce_task_grads` does) equal the single-process gradient
    of ``L`` on the concatenated batch: no loss rescaling is needed.

    Every rank must pass a tensor of the same shape (e.g. a data loader with ``drop_last=True`` and a
    ``DistributedSampler``) and call this function, and then the backward, in the same order.

    Args:
        x: tensor of this rank, rows along dim 0.

    Returns:
        a ``(world_size * x.shape[0], ...)`` tensor; ``x`` itself when ``torch.distributed`` is not initialised
        or has a single rank.
    """
    if idist.get_world_size() == 1:
        return x
    return _AllGather.apply(x)


def gather_two_view_batch(
    z: torch.Tensor, labels: Sequence[torch.Tensor | None]
) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """
    The two-view batch of all ranks in the layout of :py:class:`gcl_monai.losses.MetaContrastiveLoss`: with
    ``N`` images per rank and ``W`` ranks, rows ``0 .. WN-1`` are the first views (rank 0's images first) and
    rows ``WN .. 2WN-1`` the second views of the same images in the same order; the meta labels follow the
    image order. ``z`` is gathered with :py:func:`all_gather_with_grad` (one collective), the labels, which need
    no gradient, with one more collective.

    Args:
        z: ``(2N, ...)`` representations of this rank, the first views in rows ``0 .. N-1``, the second views in
            rows ``N .. 2N-1``.
        labels: ``(N,)`` integer meta labels of this rank's images (all of the same dtype), or ``None`` entries
            (no meta label), which are returned as ``None``.

    Returns:
        the ``(2WN, ...)`` representations and the ``(WN,)`` labels of the global batch; the inputs themselves
        when ``torch.distributed`` is not initialised or has a single rank.

    Raises:
        ValueError: when ``z`` has an odd number of rows or a label does not have ``N`` entries.
    """
    world = idist.get_world_size()
    if world == 1:
        return z, list(labels)
    if z.shape[0] % 2:
        raise ValueError(f"z must hold two views of N images (2N rows), got {z.shape[0]} rows.")
    num = z.shape[0] // 2
    rows = all_gather_with_grad(z).reshape(world, 2, num, *z.shape[1:]).transpose(0, 1).reshape(-1, *z.shape[1:])
    present = [y for y in labels if y is not None]
    if any(y.shape != (num,) for y in present):
        raise ValueError(f"meta labels must have shape ({num},), got {[tuple(y.shape) for y in present]}.")
    if not present:
        return rows, list(labels)
    gathered = iter(all_gather_with_grad(torch.stack(present)).reshape(world, len(present), num).transpose(0, 1))
    return rows, [None if y is None else next(gathered).reshape(-1) for y in labels]
