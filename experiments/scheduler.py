"""
Running an experiment's cells on several workers at once (``--jobs``, ``--devices``).

A fine-tuning cell loads its method's pre-trained encoder, so it starts only when that pre-training is done; any
other two cells are independent. With one job, the cells run one after the other in the calling process, in the
plan's order. With ``jobs`` > 1, each cell runs in a worker process (spawned, so that no CUDA or OpenMP state is
inherited) while the calling process keeps the order of readiness, the progress log and ``results.csv``. Each
running cell holds a device slot: ``devices`` are dealt round-robin to ``jobs`` slots (``--jobs 4 --devices cuda:0
cuda:1`` runs two cells on each GPU), and the cell's bundle runs get that ``device`` override, which changes only
where a cell runs, not its recorded settings (:py:data:`experiments.settings.IGNORED_KEYS`).

A worker takes ``OMP_NUM_THREADS`` torch threads when it is set, else an equal share of the machine's cores. Cells
that run side by side share the memory bandwidth and caches, so their seconds are not those of a cell alone, and the
thread count changes a cell's floating-point rounding (docs/benchmark.md).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait

import torch

from experiments import cells as cell_runs
from experiments.experiment import FinetuneCell, PretrainCell

__all__ = ["InlineExecutor", "on_device", "run_cell", "run_cells", "worker_threads"]

Cell = PretrainCell | FinetuneCell


def on_device(cell: Cell, device: str | None) -> Cell:
    """``cell`` with every bundle run of it on ``device`` (None: unchanged)."""
    if device is None:
        return cell
    override = {"device": f"$torch.device({device!r})"}
    if isinstance(cell, PretrainCell):
        return dataclasses.replace(cell, overrides={**cell.overrides, **override})
    return dataclasses.replace(
        cell,
        train_overrides={**cell.train_overrides, **override},
        eval_overrides={name: {**values, **override} for name, values in cell.eval_overrides.items()},
    )


def run_cell(cell: Cell) -> tuple[str, float]:
    """Runs one cell (:py:func:`~experiments.cells.run_pretrain` or ``run_finetune``): its outcome, seconds."""
    start = time.time()
    outcome = cell_runs.run_pretrain(cell) if isinstance(cell, PretrainCell) else cell_runs.run_finetune(cell)
    return outcome, time.time() - start


class InlineExecutor(Executor):
    """Runs each submitted call at once, in the calling process (one job)."""

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # noqa: B036 - handed to the caller through the future, as an executor does
            future.set_exception(error)
        return future


def worker_threads(jobs: int) -> int:
    """Torch threads of each worker: ``OMP_NUM_THREADS`` when set, else the machine's cores shared by ``jobs``."""
    if os.environ.get("OMP_NUM_THREADS"):
        return int(os.environ["OMP_NUM_THREADS"])
    return max(1, (os.cpu_count() or 1) // jobs)


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)


def run_cells(
    cells: Sequence[Cell],
    prepare: Callable[[int, Cell], bool],
    finish: Callable[[int, Cell, str, float], None],
    jobs: int = 1,
    devices: Sequence[str] = (),
    executor: Executor | None = None,
    run: Callable[[Cell], tuple[str, float]] = run_cell,
) -> None:
    """
    Runs ``cells`` (in execution order: a pre-training before the cells that load it) on ``jobs`` workers.

    Args:
        cells: the cells.
        prepare: called in this process when a cell is ready (its pre-training, if any, done), in the order of
            ``cells`` among the ready ones; returns whether to run it (False: taken, skipped or already done).
        finish: called in this process when a run ends, with the cell's index, the cell, its outcome and seconds.
        jobs: cells running at once.
        devices: devices dealt round-robin to the ``jobs`` slots (empty: the cells' own device).
        executor: where the runs go (default: this process for one job, else ``jobs`` spawned processes).
        run: the function running one cell in the executor (picklable for processes).

    Raises:
        ValueError: when ``jobs`` < 1.
        Exception: what a run raised outside the cell's own error handling (e.g. a worker process killed); the
            cells finished until then are kept, a rerun goes on from there.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}.")
    if executor is None:
        executor = (
            InlineExecutor()
            if jobs == 1
            else ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(worker_threads(jobs),),
            )
        )
    slots: list[str | None] = [devices[i % len(devices)] for i in range(jobs)] if devices else [None] * jobs
    pending = list(enumerate(cells))
    unfinished_pretraining = {c.folder for c in cells if isinstance(c, PretrainCell)}
    running: dict[Future, tuple[int, Cell, str | None]] = {}
    with executor:
        while pending or running:
            waiting = []
            for index, cell in pending:
                depends = isinstance(cell, FinetuneCell) and cell.pretrain is not None
                if len(running) >= jobs or (depends and cell.pretrain.folder in unfinished_pretraining):
                    waiting.append((index, cell))
                    continue
                if not prepare(index, cell):
                    unfinished_pretraining.discard(cell.folder)
                    continue
                device = slots.pop(0)
                running[executor.submit(run, on_device(cell, device))] = (index, cell, device)
            pending = waiting
            if not running:  # each pre-training was prepared in this pass, so no cell is left waiting for one
                break
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: running[f][0]):
                index, cell, device = running.pop(future)
                slots.append(device)
                unfinished_pretraining.discard(cell.folder)
                outcome, seconds = future.result()
                finish(index, cell, outcome, seconds)
