"""Ignite handler that records the pre-training scalars of every iteration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ignite.engine import Events

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["TrajectoryRecorder"]


class TrajectoryRecorder:
    """
    After every iteration of a :py:class:`gcl_monai.engines.GCLPretrainer`, stores its scalar outputs (losses per
    meta label, ``std/img``, ``cos/img``, the combiner's cosines, targets and ``acted``/``change`` statistics, ...)
    as one row of ``rows``, with the iteration and the batch size; stops the run after ``max_iterations``.

    Args:
        max_iterations: terminate the engine once this many iterations are recorded (None: run to the end).
    """

    def __init__(self, max_iterations: int | None = None) -> None:
        if max_iterations is not None and max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}.")
        self.max_iterations = max_iterations
        self.rows: list[dict[str, float]] = []
        self.task_names: list[str] = []

    def attach(self, engine: Engine) -> None:
        self.task_names = list(getattr(engine, "task_names", []))
        engine.add_event_handler(Events.ITERATION_COMPLETED, self)

    def __call__(self, engine: Engine) -> None:
        batch = engine.state.batch
        row = {"iteration": float(engine.state.iteration), "batch_size": float(len(batch[engine.view_keys[0]]))}
        row.update({k: float(v) for k, v in engine.state.output.items()})
        self.rows.append(row)
        if self.max_iterations is not None and len(self.rows) >= self.max_iterations:
            engine.terminate()
