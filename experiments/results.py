"""The results of an experiment: one row per fine-tuning run and test set, written to ``results.csv``."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from experiments.cells import labelled_subset, last_validation_dice
from experiments.done import finetune_done
from experiments.experiment import FinetuneCell
from experiments.report import VALIDATION_SET
from experiments.status import read_status
from gcl_monai.utils import atomic_write

__all__ = ["VARIANTS", "collect_rows", "labelled_patients", "write_csv"]

#: ``results.csv`` column -> ``dice.json`` key of the evaluation variants (experiments.report.VARIANT_COLUMNS)
VARIANTS = {"ed_dice": "dice_ed", "pooled_2d_dice": "dice_pooled_2d"}


def _number(value: Any) -> float:
    """A ``dice.json`` figure as a float; NaN when it is absent or None (no end-diastole volume, an older file)."""
    return math.nan if value is None else float(value)


def labelled_patients(cell: FinetuneCell) -> str:
    return ";".join(sorted({str(d.get("patient", d.get("patient_id"))) for d in labelled_subset(cell)}))


def _num_volumes(split_file: Path, part: str) -> int | str:
    """The volumes of ``part`` in a split file ("" before it is written)."""
    return len(json.loads(split_file.read_text()).get(part, ())) if split_file.exists() else ""


def collect_rows(finetune: list[FinetuneCell]) -> list[dict[str, Any]]:
    """
    One row per fine-tuning run and test set found on disk, with ``status``: ``ok`` (with its Dice), ``collapsed``
    (the pre-training collapsed, so it was never fine-tuned: Dice NaN), ``pretrain_failed`` or ``failed`` (Dice
    NaN; ``message`` that of the pre-training's status, else the cell's). Cells not run yet have no row. Each
    trained run also gets a row whose ``test_set`` is :py:data:`VALIDATION_SET`, with its last validation Dice (no
    per-class values), when it logged one: recorded in the cell's status when its training finished, read from its
    scalars for cells trained before that record.
    """
    num_val: dict[Path, int | str] = {}  # validation volumes of each split file, read once
    rows = []
    for cell in finetune:
        cell_status = read_status(cell.folder)
        pre = read_status(cell.pretrain.folder) if cell.pretrain is not None else {}
        pre_status = {"collapsed": "collapsed", "failed": "pretrain_failed"}.get(pre.get("status"))
        if pre_status is None and not cell_status and not finetune_done(cell):
            continue
        patients = labelled_patients(cell)
        message = pre.get("message", "") if pre_status else cell_status.get("message", "")
        for test_set in cell.eval_overrides:
            dice_file = cell.dice_file(test_set)
            summary = json.loads(dice_file.read_text()) if dice_file.exists() and pre_status is None else {}
            status = pre_status or ("ok" if summary else "failed")
            row = {
                "dataset": cell.dataset,
                "pretrain_dataset": cell.pretrain_dataset or "none",
                "method": cell.method,
                "num_labeled": cell.num_labeled,
                "repeat": cell.repeat,
                "draw": cell.draw,
                "seed": cell.seed,
                "pretrain_seed": "" if cell.pretrain_seed is None else cell.pretrain_seed,
                "test_set": test_set,
                "dice": summary.get("dice", math.nan),
                **{f"dice_{k}": v for k, v in summary.get("dice_per_class", {}).items()},
                **{column: _number(summary.get(key)) for column, key in VARIANTS.items()},
                "status": status,
                "labelled_patients": patients,
                "num_test_volumes": summary.get("num_volumes", ""),
                "pretrain_seconds": round(pre.get("seconds", 0.0), 1),
                "finetune_seconds": round(cell_status.get("finetune_seconds", math.nan), 1),
                "eval_seconds": round(cell_status.get("eval_seconds", {}).get(test_set, math.nan), 1),
                "finetune_iterations": cell_status.get("iterations", ""),
                "pretrain_final_loss": pre.get("final_loss", ""),
                "pretrain_final_std": pre.get("final_std", ""),
                "preset": cell.preset,
                "run_dir": str(cell.folder),
                "message": message if status != "ok" else "",
            }
            rows.append(row)
        if pre_status is None and cell_status.get("trained"):
            val = cell_status["val_dice"] if "val_dice" in cell_status else last_validation_dice(cell)
            if math.isfinite(val):
                split_file = Path(cell.train_overrides["split_file"])
                if split_file not in num_val:
                    num_val[split_file] = _num_volumes(split_file, "val")
                shared = {k: v for k, v in row.items() if not k.startswith("dice_") and k not in VARIANTS}
                rows.append(
                    {
                        **shared,
                        "test_set": VALIDATION_SET,
                        "dice": val,
                        "num_test_volumes": num_val[split_file],
                        "status": "ok",
                        "eval_seconds": "",
                        "message": "",
                    }
                )
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    """Writes ``rows`` (columns in first-seen order; per-class columns after ``dice``)."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    first = [c for c in columns if not c.startswith("dice_")]
    index = first.index("dice") + 1 if "dice" in first else len(first)
    columns = first[:index] + [c for c in columns if c.startswith("dice_")] + first[index:]
    with atomic_write(path) as partial, partial.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return path
