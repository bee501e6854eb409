"""Handler that sets GradFilter's keep fraction from the pace function g(t) (Eq. 9) at every iteration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ignite.engine import Events

from gcl_monai.losses import GradFilter, pace

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["GradFilterPaceHandler"]


class GradFilterPaceHandler:
    """
    Before each iteration t (0-based), sets ``grad_filter.keep_fraction = pace(t, T)`` (Eq. 9 divided by
    :math:`|P_u|`), so that GradFilter keeps the most certain positives first and more, harder ones as training
    goes on. The step is the engine's iteration counter, so a resumed run continues on the same schedule.

    Args:
        grad_filter: the GradFilter used by the pixel-wise loss.
        total_iterations: T; defaults to ``max_epochs * epoch_length`` of the engine.
    """

    def __init__(self, grad_filter: GradFilter, total_iterations: int | None = None) -> None:
        self.grad_filter = grad_filter
        self.total_iterations = total_iterations

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.ITERATION_STARTED, self)

    def __call__(self, engine: Engine) -> None:
        total = self.total_iterations or engine.state.max_epochs * engine.state.epoch_length
        self.grad_filter.keep_fraction = pace(engine.state.iteration - 1, total)
        engine.state.pace = self.grad_filter.keep_fraction
