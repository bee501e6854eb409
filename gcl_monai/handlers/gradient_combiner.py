"""Handler that combines the per-meta-label gradients of a GCL iteration into ``param.grad``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gcl_monai.engines.events import GCLEvents, TaskGradients
from gcl_monai.gradients.combiner import GradientCombiner
from gcl_monai.gradients.distributed import all_reduce_task_grads

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["GradientCombinerHandler"]


class GradientCombinerHandler:
    """
    At :py:attr:`GCLEvents.GRADIENTS_COMPUTED`, takes the iteration's :py:class:`gcl_monai.engines.TaskGradients`
    (``engine.state.gradients``), averages each meta label's gradient across processes (one coalesced all-reduce
    when ``torch.distributed`` is initialised with more than one rank, so that every rank combines the same global
    gradients and keeps the same EMA targets), combines them with ``combiner`` and applies the result to the
    parameters' ``.grad`` (:py:meth:`TaskGradients.apply`).

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
