"""
Runs a benchmark experiment: the paper's protocol, cell by cell, through the bundles' own configs (the scheduling;
planning, running a cell, progress and results each have their own module).

An experiment lives in ``<results_dir>/<name>/``:

- ``plan.json``: the experiment and preset (a rerun with other settings under the same name is refused);
- ``split.json`` (and ``split_<pretrain data>.json`` out of distribution): the patient-level split shared by
  every method;
- ``pretrain/<method>/``: the pre-training bundle's run folder (checkpoints, ``encoder.pt``, ``tensorboard/``) and
  ``benchmark.json`` (status, seconds, final loss);
- ``finetune/<method>_L<L>_d<draw>_s<seed>/``: the fine-tuning bundle's output folder, ``models/model.pt``, one
  ``eval*/dice.json`` per test set and ``benchmark.json``;
- ``results.csv``, ``table.md``, ``dice_vs_L.png``, ``pretrain_curves.png`` and ``progress.log``.

Every cell is a ``monai.bundle.run`` of ``pretrain.json``, ``train.json`` or ``evaluate.json`` with overrides; a
finished cell is skipped by a rerun and an interrupted pre-training resumes from its last checkpoint; a cell on disk
that ran with other settings than the plan gives it stops the run before anything starts
(:py:func:`gcl_monai.benchmark.plan.check_cell_settings`). With ``jobs`` > 1 the cells run in worker processes,
a fine-tuning cell once its pre-training is done (:py:mod:`gcl_monai.benchmark.scheduler`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gcl_monai.benchmark.bundles import parse_bundle_item
from gcl_monai.benchmark.cells import pretrain_done, read_status
from gcl_monai.benchmark.experiment import Experiment, FinetuneCell, PretrainCell
from gcl_monai.benchmark.plan import (
    check_cell_settings,
    check_plan,
    describe,
    describe_header,
    execution_order,
    plan_cells,
    whole_experiment,
    write_plan,
)
from gcl_monai.benchmark.progress import Progress, hms, past_durations
from gcl_monai.benchmark.report import write_report
from gcl_monai.benchmark.results import collect_rows, write_csv
from gcl_monai.benchmark.reuse import import_finetuning, import_pretraining
from gcl_monai.benchmark.scheduler import run_cells

__all__ = ["run_experiment"]

logger = logging.getLogger("gcl_monai.benchmark")


@contextmanager
def _log_to(path: Path) -> Iterator[None]:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


def run_experiment(
    experiment: Experiment,
    dry_run: bool = False,
    pretrain_from: Sequence[Path] = (),
    finetune_from: Sequence[Path] = (),
    jobs: int = 1,
    devices: Sequence[str] = (),
) -> Path | None:
    """
    Runs every cell not finished yet, then writes ``results.csv``, ``table.md`` and the plots.

    Args:
        experiment: the experiment.
        dry_run: only print the plan (cells and overrides).
        pretrain_from: folders of other experiments whose finished pre-trainings are taken instead of running the
            same pre-training again (:py:func:`gcl_monai.benchmark.reuse.import_pretraining`).
        finetune_from: folders of other experiments whose trained fine-tuning cells are taken instead of running
            the same cell again (:py:func:`gcl_monai.benchmark.reuse.import_finetuning`).
        jobs: cells running at once (:py:mod:`gcl_monai.benchmark.scheduler`): one runs them in this process in
            the plan's order; more run each in a worker process, a fine-tuning cell once its pre-training is done.
        devices: devices dealt round-robin to the ``jobs`` workers' cells (empty: the preset's device).

    Returns:
        the path of ``results.csv`` (None for a dry run).
    """
    pretrain, finetune = plan_cells(experiment)
    cells = execution_order(pretrain, finetune)
    if dry_run:
        print(describe(experiment, cells))
        return None
    check_plan(experiment)
    check_cell_settings(cells)
    # plan.json, results.csv and table.md hold every cell of the folder, also those of earlier runs' methods and L
    whole = whole_experiment(experiment)
    every_pretrain, every_finetune = plan_cells(whole)
    experiment.folder.mkdir(parents=True, exist_ok=True)
    write_plan(whole, every_pretrain, every_finetune)
    with _log_to(experiment.folder / "progress.log"):
        logger.info("%s", "\n".join(describe_header(experiment, len(cells))))
        # the split files first: every method then reads the same patients
        for dataset, config in ((experiment.data, "train"), (experiment.source, "pretrain")):
            parse_bundle_item(experiment.bundle(dataset), config, "split", experiment.overrides(dataset))
        progress = Progress(cells, past_durations(pretrain, finetune), jobs=jobs)

        def prepare(index: int, cell: PretrainCell | FinetuneCell) -> bool:
            """Takes, skips or starts a cell whose pre-training is done; True when it is to run."""
            if isinstance(cell, PretrainCell) and (taken := import_pretraining(cell, list(pretrain_from))):
                progress.add_recorded(cell)
                progress.log(index, cell, f"taken from {taken}")
                return False
            if isinstance(cell, FinetuneCell) and (taken := import_finetuning(cell, list(finetune_from))):
                progress.add_recorded(cell)
                progress.log(index, cell, f"taken from {taken}", started=not cell.finished())
                if cell.finished():
                    return False
            if isinstance(cell, PretrainCell) and pretrain_done(cell):
                progress.log(index, cell, f"already {read_status(cell.folder)['status']}, skipped")
                return False
            if isinstance(cell, FinetuneCell) and cell.finished():
                progress.log(index, cell, "already finished, skipped")
                return False
            if isinstance(cell, FinetuneCell) and cell.pretrain is not None:
                pre = read_status(cell.pretrain.folder).get("status")
                if pre != "finished":
                    progress.log(index, cell, f"skipped: its pre-training is {pre or 'missing'}")
                    return False
            progress.log(index, cell, "starting", started=True)
            return True

        def finish(index: int, cell: PretrainCell | FinetuneCell, outcome: str, seconds: float) -> None:
            if outcome == "finished":
                progress.add(cell, seconds)
            progress.log(index, cell, f"{outcome} in {hms(seconds)}")
            write_csv(collect_rows(experiment, every_finetune), experiment.folder / "results.csv")

        run_cells(cells, prepare, finish, jobs=jobs, devices=devices)
        csv_path = write_csv(collect_rows(experiment, every_finetune), experiment.folder / "results.csv")
        write_report(experiment.folder)
        logger.info("Results in %s; table in %s.", csv_path, experiment.folder / "table.md")
    return csv_path
