"""
Runs a benchmark experiment in one pass: plan, run, report. The plan (:py:mod:`experiments.plan`) describes
every cell once, from the experiment; the run takes, skips or runs each cell (:py:mod:`experiments.reuse`,
:py:mod:`experiments.cells`, on workers: :py:mod:`experiments.scheduler`); the report reads what
the cells left on disk (:py:mod:`experiments.results`, :py:mod:`experiments.report`).

An experiment lives in ``<results_dir>/<name>/``:

- ``plan.json``: the experiment and preset (a rerun with other settings under the same name is refused);
- ``split.json`` (and ``split_<pretrain data>.json`` out of distribution): the patient-level split shared by
  every method;
- ``pretrain/<method>/``: the pre-training bundle's run folder (checkpoints, ``encoder.pt``, ``tensorboard/``) and
  ``benchmark.json`` (status, seconds, final loss);
- ``finetune/<method>_L<L>_d<draw>_s<seed>/``: the fine-tuning bundle's output folder, ``models/model.pt``, one
  ``eval*/dice.json`` per test set and ``benchmark.json``;
- ``results.csv``, ``table.md``, ``dice_vs_L.png``, ``pretrain_curves.png`` and ``progress.log``.

Every cell is a ``monai.bundle.run`` of ``pretrain.json``, ``train.json`` or ``evaluate.json`` (on top of
``train.json``) with overrides; a finished cell is skipped by a rerun and an interrupted pre-training resumes from its
last checkpoint; a cell on disk that ran with other settings than the plan gives it stops the run before anything
starts (:py:func:`experiments.plan.check_cell_settings`). Checks given by the caller (:py:data:`CellCheck`) may keep a
cell from running, or log what they did to its folder. With ``jobs`` > 1 the cells run in worker processes, a
fine-tuning cell once its pre-training is done.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from experiments.bundles import parse_bundle_item
from experiments.done import finetune_done, pretrain_done
from experiments.experiment import Experiment, FinetuneCell, PretrainCell
from experiments.fingerprints import record_encoder_hash
from experiments.plan import PLAN_FILE, describe, plan_experiment
from experiments.progress import Progress, hms
from experiments.report import write_report
from experiments.results import collect_rows, write_csv
from experiments.reuse import import_finetuning, import_pretraining
from experiments.scheduler import run_cells
from experiments.status import read_status

__all__ = ["CellCheck", "run_experiment"]

logger = logging.getLogger("experiments")

Cell = PretrainCell | FinetuneCell
#: a check of one cell, called with the cell and the experiment's fine-tuning cells (those of ``results.csv``) before
#: the run takes the cell and again once it ran: None when it has nothing to say, else what to log of the cell and
#: whether the cell (still) runs
CellCheck = Callable[[Cell, Sequence[FinetuneCell]], tuple[str, bool] | None]


def run_experiment(
    experiment: Experiment,
    dry_run: bool = False,
    pretrain_from: Sequence[Path] = (),
    finetune_from: Sequence[Path] = (),
    jobs: int = 1,
    devices: Sequence[str] = (),
    checks: Sequence[CellCheck] = (),
) -> Path | None:
    """
    Runs every cell not finished yet, then writes ``results.csv``, ``table.md`` and the plots.

    Args:
        experiment: the experiment.
        dry_run: only print the plan (cells and overrides).
        pretrain_from: folders of other experiments whose finished pre-trainings are taken instead of running the
            same pre-training again (:py:func:`experiments.reuse.import_pretraining`).
        finetune_from: folders of other experiments whose trained fine-tuning cells are taken instead of running
            the same cell again (:py:func:`experiments.reuse.import_finetuning`).
        jobs: cells running at once (:py:mod:`experiments.scheduler`): one runs them in this process in
            the plan's order; more run each in a worker process, a fine-tuning cell once its pre-training is done.
        devices: devices dealt round-robin to the ``jobs`` workers' cells (empty: the preset's device).
        checks: the caller's checks of each cell (:py:data:`CellCheck`), in this order, before any other rule
            takes, skips or starts the cell, and after it ran.

    Returns:
        the path of ``results.csv`` (None for a dry run).
    """
    plan = plan_experiment(experiment, check=not dry_run)
    if dry_run:
        print(describe(plan))
        return None
    plan.folder.mkdir(parents=True, exist_ok=True)
    (plan.folder / PLAN_FILE).write_text(json.dumps(plan.record, indent=1))
    # the split files first: every method then reads the same patients
    for bundle, config, overrides in plan.splits:
        parse_bundle_item(bundle, config, "split", overrides)
    csv_path = plan.folder / "results.csv"
    with Progress(plan.cells, plan.folder / "progress.log", jobs=jobs) as progress:
        logger.info("%s", "\n".join(plan.header))

        def checked(index: int, cell: Cell) -> bool:
            """Runs the checks on ``cell`` and logs what they say; True when one of them keeps it from running."""
            for check in checks:
                if (said := check(cell, plan.results_cells)) is not None:
                    message, runs = said
                    progress.log(index, cell, message)
                    if not runs:
                        return True
            return False

        def prepare(index: int, cell: Cell) -> bool:
            """Takes, skips or starts a cell whose pre-training is done; True when it is to run."""
            if checked(index, cell):
                return False
            if isinstance(cell, PretrainCell) and (taken := import_pretraining(cell, list(pretrain_from))):
                progress.add_recorded(cell)
                progress.log(index, cell, f"taken from {taken}")
                return False
            if isinstance(cell, FinetuneCell) and (taken := import_finetuning(cell, list(finetune_from))):
                progress.add_recorded(cell)
                progress.log(index, cell, f"taken from {taken}", started=not finetune_done(cell))
                if finetune_done(cell):
                    return False
            if isinstance(cell, PretrainCell) and pretrain_done(cell):
                record_encoder_hash(cell)
                progress.log(index, cell, f"already {read_status(cell.folder)['status']}, skipped")
                return False
            if isinstance(cell, FinetuneCell) and finetune_done(cell):
                progress.log(index, cell, "already finished, skipped")
                return False
            if isinstance(cell, FinetuneCell) and cell.pretrain is not None:
                pre = read_status(cell.pretrain.folder).get("status")
                if pre != "finished":
                    progress.log(index, cell, f"skipped: its pre-training is {pre or 'missing'}")
                    return False
            progress.log(index, cell, "starting", started=True)
            return True

        def finish(index: int, cell: Cell, outcome: str, seconds: float) -> None:
            if outcome == "finished":
                progress.add(cell, seconds)
            progress.log(index, cell, f"{outcome} in {hms(seconds)}")
            checked(index, cell)
            write_csv(collect_rows(plan.results_cells), csv_path)

        run_cells(plan.cells, prepare, finish, jobs=jobs, devices=devices)
        write_csv(collect_rows(plan.results_cells), csv_path)
        write_report(plan.folder)
        logger.info("Results in %s; table in %s.", csv_path, plan.folder / "table.md")
    return csv_path
