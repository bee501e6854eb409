"""
The per-meta-label gradients' path from the backward pass to ``param.grad``, in one place.

One iteration of :py:class:`gcl_monai.engines.GCLPretrainer` computes ``M`` losses (one per meta label) from one
forward pass. GradMitigator (Algorithm 1 of GCL) needs each loss's own gradient, so the trainer does not call
``loss.backward()``; the gradients take this path:

1. backward: :py:func:`task_gradients` computes ``g_m = dL^m / dtheta`` for every meta label ``m`` over the shared
   graph (``M`` backward passes, or one batched pass).
2. event: the trainer stores them as ``engine.state.gradients`` (a :py:class:`TaskGradients`) and fires
   :py:attr:`GCLEvents.GRADIENTS_COMPUTED`.
3. handler: exactly one handler combines them, :py:class:`GradientCombinerHandler` (as ignite handlers do, so that
   the combiner is a bundle setting): under ``torch.distributed`` it first averages each meta label's gradient
   across ranks (:py:func:`all_reduce_task_grads`), then calls the combiner (a
   :py:class:`gcl_monai.gradients.GradMitigator`, or :py:class:`gcl_monai.gradients.MeanCombiner` for the ablation).
4. apply: :py:meth:`TaskGradients.apply` writes the combined gradient to ``param.grad`` (once per iteration).
5. the trainer steps the optimizer.

The handler is mandatory: the trainer checks when the run starts (``Events.STARTED``, before any iteration) that a
handler listens to :py:attr:`GCLEvents.GRADIENTS_COMPUTED` (:py:func:`require_gradient_combiner`), and after each
event that the gradients were applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import ignite.distributed as idist
import torch
import torch.distributed as dist
from ignite.engine import EventEnum

if TYPE_CHECKING:
    from ignite.engine import Engine

    from gcl_monai.gradients import GradientCombiner

__all__ = [
    "GCLEvents",
    "GradientCombinerHandler",
    "TaskGradients",
    "all_reduce_task_grads",
    "require_gradient_combiner",
    "task_gradients",
]

#: the error of a run started without a combining handler, and of an iteration whose gradients were not applied
MISSING_HANDLER = (
    "attach a gcl_monai.handlers.GradientCombinerHandler (with a GradMitigator or a MeanCombiner) to the trainer: "
    "it combines the per-meta-label gradients into param.grad at GCLEvents.GRADIENTS_COMPUTED"
)


def task_gradients(
    losses: Sequence[torch.Tensor], params: Sequence[torch.Tensor], batched: bool = False
) -> list[list[torch.Tensor]]:
    """
    Step 1: the gradients :math:`g_m = \\partial L^m / \\partial \\theta` of ``M`` scalar losses computed from one
    forward pass: one list of per-parameter gradients per loss, zeros for the parameters a loss does not reach.

    Two exact ways, whose speed depends on the device (``benchmarks.bench_pretrain_iteration`` measures both):
    ``batched=False``, one ``torch.autograd.grad`` call per loss over the shared graph (kept alive until the last
    call), i.e. ``M`` backward passes; ``batched=True``, one backward pass of the stacked losses with the ``M`` unit
    vectors as a batch of output gradients (``is_grads_batched``, vectorised by ``torch.vmap``): the same arithmetic
    per loss, fewer and larger kernels, ``M`` times the memory of the gradients of the activations.

    Args:
        losses: ``M`` scalar tensors sharing a graph.
        params: the tensors to differentiate with respect to (``requires_grad``).
        batched: use one batched backward pass instead of ``M`` passes.

    Returns:
        ``M`` lists of ``len(params)`` tensors, shaped like ``params``.
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


class GCLEvents(EventEnum):
    """
    Step 2: ``GRADIENTS_COMPUTED``, fired once per iteration of :py:class:`gcl_monai.engines.GCLPretrainer` after the
    per-meta-label gradients were computed and before the optimizer steps. ``engine.state.gradients`` then holds a
    :py:class:`TaskGradients`; exactly one handler (:py:class:`GradientCombinerHandler`) combines them and calls
    :py:meth:`TaskGradients.apply`, which writes ``param.grad``.
    """

    GRADIENTS_COMPUTED = "gradients_computed"


@dataclass
class TaskGradients:
    """
    The per-meta-label gradients of one pre-training iteration (``engine.state.gradients`` at
    :py:attr:`GCLEvents.GRADIENTS_COMPUTED`).

    Args:
        names: the meta labels' names in logs, one per task (``"simclr"`` for SimCLR's positives).
        params: the trainable parameters, in the order of every task's gradient list.
        grads: ``grads[m][p]``, the gradient of meta label ``m``'s loss with respect to ``params[p]``; None once
            applied.
        stats: scalars reported by the handler that applied the gradients (0-d tensors, e.g. GradMitigator's
            cosines and targets); the trainer adds them to the iteration's output.
        applied: whether ``param.grad`` has been written for this iteration.
    """

    names: list[str]
    params: list[torch.Tensor]
    grads: list[list[torch.Tensor]] | None
    stats: dict[str, torch.Tensor] = field(default_factory=dict)
    applied: bool = False

    def apply(self, combined: Sequence[torch.Tensor], stats: dict[str, torch.Tensor] | None = None) -> None:
        """
        Step 4: write one combined gradient per parameter to ``param.grad`` and release the per-task gradients.

        Args:
            combined: one tensor per entry of ``params``, in the same order.
            stats: scalars to log with the iteration's output.

        Raises:
            RuntimeError: when the gradients of this iteration were applied already.
            ValueError: when ``combined`` does not hold one tensor per parameter.
        """
        if self.applied:
            raise RuntimeError("the per-meta-label gradients of this iteration were applied already.")
        combined = list(combined)
        if len(combined) != len(self.params):
            raise ValueError(
                f"expected {len(self.params)} combined gradients (one per parameter), got {len(combined)}."
            )
        for param, grad in zip(self.params, combined):
            param.grad = grad
        self.grads = None
        self.stats = dict(stats or {})
        self.applied = True


def all_reduce_task_grads(grads: list[list[torch.Tensor]]) -> list[list[torch.Tensor]]:
    """
    Step 3, under ``torch.distributed``: averages each task's (meta label's) gradient over all ranks with ONE
    all-reduce: the M gradients are flattened into an (M, numel) buffer, summed across ranks and divided by the world
    size. Every rank then holds the same M global gradients, so GradMitigator (whose cosines are not linear in the
    gradients) runs on the gradients of the global batch and keeps the same EMA targets on all ranks.

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


class GradientCombinerHandler:
    """
    Step 3: at :py:attr:`GCLEvents.GRADIENTS_COMPUTED`, takes the iteration's :py:class:`TaskGradients`
    (``engine.state.gradients``), averages each meta label's gradient across processes
    (:py:func:`all_reduce_task_grads`, when ``torch.distributed`` runs more than one rank, so that every rank
    combines the same global gradients and keeps the same EMA targets), combines them with ``combiner`` and applies
    the result to the parameters' ``.grad`` (:py:meth:`TaskGradients.apply`).

    ``combiner`` is a :py:class:`gcl_monai.gradients.GradMitigator` (Algorithm 1) for GCL, or a
    :py:class:`gcl_monai.gradients.MeanCombiner` (the plain mean of Eq. 2) for the "multi meta labels, no
    mitigation" ablation. The handler holds no state of its own: checkpoint the combiner (the bundles'
    ``checkpoint_dict`` holds ``@train#combiner``). The combiner's scalar summaries (cosine similarities and EMA
    targets) are applied with the gradients as 0-d tensors on the gradients' device
    (``combiner.summary(as_tensors=True)``), so that nothing waits for the device before the optimizer step; the
    trainer adds them to the iteration's output, which MONAI's stats handlers log.

    Args:
        combiner: a :py:class:`gcl_monai.gradients.GradientCombiner`.
        distributed: average the gradients across ranks before combining (ignored in a single process).
    """

    def __init__(self, combiner: GradientCombiner, distributed: bool = True) -> None:
        self.combiner = combiner
        self.distributed = distributed

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(GCLEvents.GRADIENTS_COMPUTED, self)

    def __call__(self, engine: Engine) -> None:
        gradients: TaskGradients = engine.state.gradients
        grads = all_reduce_task_grads(gradients.grads) if self.distributed else gradients.grads
        gradients.apply(self.combiner.combine(grads), stats=self.combiner.summary(as_tensors=True))


def require_gradient_combiner(engine: Engine) -> None:
    """
    At ``Events.STARTED`` of a pre-training run: a handler must listen to :py:attr:`GCLEvents.GRADIENTS_COMPUTED`,
    so that a run without one stops before its first iteration (one that listens but applies nothing is stopped
    after the event, by the trainer).

    Raises:
        RuntimeError: naming :py:class:`GradientCombinerHandler`, when no handler listens.
    """
    if not engine._event_handlers.get(GCLEvents.GRADIENTS_COMPUTED):  # ignite has no public count of the handlers
        raise RuntimeError(f"no handler combines the per-meta-label gradients: {MISSING_HANDLER}.")
