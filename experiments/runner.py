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

Every cell is a ``monai.bundle.run`` of ``pretrain.json``, ``train.json`` or ``evaluate.json`` with overrides; a
finished cell is skipped by a rerun and an interrupted pre-training resumes from its last checkpoint; a cell on disk
that ran with other settings than the plan gives it stops the run before anything starts
(:py:func:`experiments.cells.check_cell_settings`); cells set aside (:py:mod:`experiments.remade`)
go to ``discarded/``. With ``jobs`` > 1 the cells run in worker processes, a fine-tuning cell once its
pre-training is done.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from experiments.bundles import parse_bundle_item
from experiments.cells import (
    MODEL_ELSEWHERE,
    REMADE_HASH_KEY,
    encoder_elsewhere,
    finetune_done,
    forget_encoder_hash,
    model_elsewhere,
    pretrain_done,
    read_status,
    record_encoder_hash,
    trained,
)
from experiments.experiment import Experiment, FinetuneCell, PretrainCell
from experiments.plan import PLAN_FILE, describe, plan_experiment
from experiments.progress import Progress, hms
from experiments.remade import loads, replace_encoder
from experiments.report import write_report
from experiments.results import collect_rows, write_csv
from experiments.reuse import import_finetuning, import_pretraining
from experiments.scheduler import run_cells

__all__ = ["run_experiment"]

logger = logging.getLogger("experiments")


def run_experiment(
    experiment: Experiment,
    dry_run: bool = False,
    pretrain_from: Sequence[Path] = (),
    finetune_from: Sequence[Path] = (),
    jobs: int = 1,
    devices: Sequence[str] = (),
    remake_encoders: bool = False,
    set_aside_stale_cells: bool = False,
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
        remake_encoders: make again the encoder of a finished pre-training whose weights are not on this machine
            (its records restored, :py:mod:`experiments.records`) even when no fine-tuning cell left needs it
            (e.g. to probe it); by default only a pre-training that a cell still to train loads runs again.
        set_aside_stale_cells: when such a pre-training makes an encoder with other bytes than the first (by
            default a failure), take the new one and set aside the cells that loaded the first, which then run
            again (:py:mod:`experiments.remade`).

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

        def take_remade(index: int, cell: PretrainCell | FinetuneCell) -> bool:
            """With ``set_aside_stale_cells``, takes an encoder made again with other bytes; True when taken."""
            status = read_status(cell.folder) if isinstance(cell, PretrainCell) else {}
            if not (set_aside_stale_cells and status.get("status") == "failed" and REMADE_HASH_KEY in status):
                return False
            moved = replace_encoder(cell, plan.results_cells)
            names = ", ".join(p.name for p in moved) or "none"
            progress.log(index, cell, f"made again with other bytes: the new encoder taken; set aside: {names}")
            return True

        def prepare(index: int, cell: PretrainCell | FinetuneCell) -> bool:
            """Takes, skips or starts a cell whose pre-training is done; True when it is to run."""
            if take_remade(index, cell):
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
            if isinstance(cell, PretrainCell) and encoder_elsewhere(cell):
                trained_loading = [trained(read_status(c.folder)) for c in plan.results_cells if loads(c, cell)]
                if not remake_encoders and all(trained_loading):
                    message = (
                        "finished on another machine, its encoder not here; no cell left to train loads it: "
                        "not made again"
                    )
                    progress.log(index, cell, f"{message} (--remake-encoders makes it)")
                    return False
                if not any(trained_loading):
                    forget_encoder_hash(cell)
                    progress.log(index, cell, "its encoder stayed on another machine and no cell trained with it: new")
            if isinstance(cell, FinetuneCell) and finetune_done(cell):
                progress.log(index, cell, "already finished, skipped")
                return False
            if isinstance(cell, FinetuneCell) and model_elsewhere(cell):
                left = ", ".join(t for t in cell.eval_overrides if not cell.dice_file(t).exists())
                progress.log(index, cell, f"{left}: {MODEL_ELSEWHERE}")
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
            take_remade(index, cell)
            write_csv(collect_rows(plan.results_cells), csv_path)

        run_cells(plan.cells, prepare, finish, jobs=jobs, devices=devices)
        write_csv(collect_rows(plan.results_cells), csv_path)
        write_report(plan.folder)
        logger.info("Results in %s; table in %s.", csv_path, plan.folder / "table.md")
    return csv_path
