"""Per-meta-label gradient averaging across processes (torch.distributed), before GradMitigator."""

from __future__ import annotations

import ignite.distributed as idist
import torch
import torch.distributed as dist

__all__ = ["all_reduce_task_grads"]


def all_reduce_task_grads(grads: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """
    Averages each task's (meta label's) gradient over all ranks with ONE all-reduce: the M gradients are
    flattened into an (M, numel) buffer, summed across ranks and divided by the world size. Every rank then
    holds the same M global gradients, so GradMitigator (whose cosines are not linear in the gradients) runs on
    the gradients of the global batch and keeps the same EMA targets on all ranks.

    Returns the input unchanged when ``torch.distributed`` is not initialised or has a single rank.

    Args:
        grads: one list of gradient tensors per task, aligned across tasks.
    """
    world = idist.get_world_size()
    if world == 1:
        return grads
    shapes = [g.shape for g in grads[0]]
    flat = torch.stack([torch.cat([g.reshape(-1) for g in task]) for task in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world
    sizes = [s.numel() for s in shapes]
    return [[g.view(s) for g, s in zip(row.split(sizes), shapes)] for row in flat]
