"""The gradient of every meta label's loss over one shared forward graph."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["task_gradients"]


def task_gradients(
    losses: Sequence[torch.Tensor], params: Sequence[torch.Tensor], batched: bool = False
) -> list[list[torch.Tensor]]:
    """
    The gradients :math:`g_m = \\partial L^m / \\partial \\theta` of ``M`` scalar losses computed from one forward
    pass, as GradMitigator (Algorithm 1 of GCL) needs them: one list of per-parameter gradients per loss, zeros
    for the parameters a loss does not reach.

    Two exact ways are offered, whose speed depends on the device (``benchmarks.bench_pretrain_iteration``
    measures both):

        - ``batched=False``: one ``torch.autograd.grad`` call per loss over the shared graph (kept alive until the
          last call), i.e. ``M`` backward passes;
        - ``batched=True``: one backward pass of the stacked losses with the ``M`` unit vectors as a batch of
          output gradients (``is_grads_batched``, vectorised by ``torch.vmap``): the same arithmetic per loss,
          fewer and larger kernels, ``M`` times the memory of the gradients of the activations.

    Args:
        losses: ``M`` scalar tensors sharing a graph.
        params: the tensors to differentiate with respect to (``requires_grad``).
        batched: use one batched backward pass instead of ``M`` passes.

    Returns:
        ``M`` lists of ``len(params)`` tensors, shaped like ``params``.

    Example::

        out = network(views)
        grads = task_gradients([loss_fn(out, y) for y in meta_labels], list(network.parameters()))
    """
    params = list(params)
    if batched and len(losses) > 1:
        stacked = torch.stack(list(losses))
        eye = torch.eye(len(losses), dtype=stacked.dtype, device=stacked.device)
        grads = torch.autograd.grad(stacked, params, grad_outputs=eye, is_grads_batched=True, allow_unused=True)
        return [[torch.zeros_like(p) if g is None else g[m] for p, g in zip(params, grads)] for m in range(len(losses))]
    last = len(losses) - 1
    return [
        [
            torch.zeros_like(p) if g is None else g
            for p, g in zip(params, torch.autograd.grad(loss, params, retain_graph=i < last, allow_unused=True))
        ]
        for i, loss in enumerate(losses)
    ]
