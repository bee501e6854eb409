"""
The small steps of a bundle's workflow that MONAI's components don't name: a logging interval, the scalars of an
iteration's output, the meta data of a decollated batch, attaching a list of handlers, releasing the kept model and
printing the evaluation's summary. Named here so that the configs call them instead of spelling lambdas and
statements in ``$`` expressions.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["every", "as_floats", "image_meta", "attach_all", "release_model", "print_summary"]


def every(n: int) -> Callable[[Any, int], bool]:
    """An ignite event filter true every ``n``-th iteration (``StatsHandler(iteration_log=every(25))``)."""
    if n < 1:
        raise ValueError(f"every: n must be >= 1, got {n}.")
    return lambda engine, iteration: iteration % n == 0


def as_floats(output: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of an iteration's output dict as Python floats, for the loss handlers' ``output_transform``."""
    return {key: float(value) for key, value in output.items()}


def image_meta(batch: Sequence[Mapping[str, Any]], key: str = "image") -> list[dict]:
    """The meta data of ``key`` of each item of a decollated batch (``MetricsSaver``'s ``batch_transform``)."""
    return [item[key].meta for item in batch]


def attach_all(handlers: Iterable[Any], engine: Any) -> None:
    """``handler.attach(engine)`` for each handler (handlers a workflow attaches itself, after the engine exists)."""
    for handler in handlers:
        handler.attach(engine)


def release_model(output_dir: str | os.PathLike, ckpt_dir: str | os.PathLike, name: str = "model.pt") -> Path:
    """Copies the run's kept model (``output_dir/name``, the best on validation) to the bundle's ``ckpt_dir``, where
    ``evaluate.json``, ``inference.json`` and MONAI Label read it: ``train.json``'s ``finalize`` (``evaluate.json``,
    run on top of ``train.json``, empties it). Refuses, naming the path, a run that kept none."""
    source = Path(output_dir) / name
    if not source.is_file():
        raise FileNotFoundError(f"release_model: {source} does not exist: the run saved no model to release.")
    target = Path(ckpt_dir) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.resolve() != target.resolve():
        shutil.copyfile(source, target)
    return target


def print_summary(summary: Mapping[str, Any], leave_out: Sequence[str] = ("per_volume",)) -> None:
    """Prints an evaluation's summary (``DiceSummary``'s) as JSON on stdout, without its per-volume rows."""
    print(json.dumps({k: v for k, v in summary.items() if k not in leave_out}, indent=1))
