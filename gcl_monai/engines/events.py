"""The custom ignite event of the GCL pre-training iteration and what it hands to its handler."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from ignite.engine import EventEnum

__all__ = ["GCLEvents", "TaskGradients"]


class GCLEvents(EventEnum):
    """
    ``GRADIENTS_COMPUTED``: fired once per iteration of :py:class:`gcl_monai.engines.GCLPretrainer`, after the
    per-meta-label gradients were computed and before the optimizer steps. ``engine.state.gradients`` then holds a
    :py:class:`TaskGradients`; exactly one handler (for example :py:class:`gcl_monai.handlers.GradientCombinerHandler`)
    must combine them and call :py:meth:`TaskGradients.apply`, which writes ``param.grad``.
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
        Write one combined gradient per parameter to ``param.grad`` and release the per-task gradients.

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
