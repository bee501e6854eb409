"""Handler that turns the per-meta-label gradients into ``param.grad`` (GradMitigator, Algorithm 1, or Eq. 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gcl_monai.engines.events import GCLEvents
from gcl_monai.gradients.distributed import all_reduce_task_grads

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["GradMitigatorHandler"]


class GradMitigatorHandler:
    """
    At :py:attr:`GCLEvents.GRADIENTS_COMPUTED`, averages each meta label's gradient across processes (one
    coalesced all-reduce when ``torch.distributed`` is initialised with more than one rank, so that every rank
    mitigates the same global gradients and keeps the same EMA targets), combines them with ``combiner`` and
    writes the result to the parameters' ``.grad``.

    ``combiner`` is a :py:class:`gcl_monai.gradients.GradMitigator` for GCL, or a
    :py:class:`gcl_monai.gradients.MeanCombiner` for the "multi meta labels averaged, no mitigation" ablation. The
    handler forwards ``state_dict``/``load_state_dict`` to it, so it can be passed to a ``CheckpointSaver``.
    Scalar summaries (cosine similarities and EMA targets) are put in ``engine.state.gradient_stats``.

    Args:
        combiner: object with ``combine(grads)``, ``summary()``, ``state_dict()`` and ``load_state_dict()``.
        distributed: average the gradients across ranks before combining (ignored in a single process).
    """

    def __init__(self, combiner: Any, distributed: bool = True) -> None:
        self.combiner = combiner
        self.distributed = distributed

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(GCLEvents.GRADIENTS_COMPUTED, self)

    def __call__(self, engine: Engine) -> None:
        grads = engine.state.task_grads
        if self.distributed:
            grads = all_reduce_task_grads(grads)
        for param, grad in zip(engine.state.task_params, self.combiner.combine(grads)):
            param.grad = grad
        engine.state.task_grads = None
        engine.state.gradient_stats = self.combiner.summary()

    def state_dict(self) -> dict:
        return self.combiner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.combiner.load_state_dict(state)
