"""
The cells fine-tuned from a restored encoder (docs/protocol_converged.md, amendment 5). On a new machine a finished
pre-training's ``encoder.pt`` is put back from its kept bfloat16 card (``restore --encoders``,
:py:func:`~experiments.gpu_session.kept_encoders.restore_experiment_encoders`), whose status records the fine-tuning
cells already finished then; every other finished cell of that pre-training loaded the rounded weights. The analysis
is unchanged; its report names those cells and, where a pre-training's cells include both kinds, gives the primary
comparisons without them (:func:`write_sensitivity`): a sensitivity analysis, not a further test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.experiment import pretrain_name
from experiments.gpu_session.kept_encoders import RESTORED_KEY
from experiments.presets import METHODS
from experiments.report import finished_row, markdown_table
from experiments.status import STATUS_FILE, read_status
from experiments.study.intervals import SeedAwareDifference
from experiments.study.protocol import write_csv

__all__ = ["RestoredCells", "restored_cells", "write_sensitivity"]


@dataclass(frozen=True)
class RestoredCells:
    """``cells``: each restored pre-training's finished cells fine-tuned from its restored encoder; ``mixed``: the
    pre-trainings whose finished cells include cells fine-tuned from the first encoder too."""

    cells: Mapping[str, tuple[str, ...]]
    mixed: tuple[str, ...]

    def names(self) -> set[str]:
        """Every cell fine-tuned from a restored encoder."""
        return {cell for cells in self.cells.values() for cell in cells}

    def without(self, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """``rows`` less those of the cells fine-tuned from a restored encoder."""
        names = self.names()
        return [r for r in rows if _cell(r) not in names]

    def lines(self) -> list[str]:
        """The report's paragraph naming the cells (none when nothing was restored)."""
        if not self.cells:
            return []
        named = "; ".join(f"`{p}`: {', '.join(cells) or 'none'}" for p, cells in self.cells.items())
        mixed = ", ".join(f"`{p}`" for p in self.mixed) or "none"
        return [
            "Fine-tuned from an encoder restored from its kept bfloat16 card (docs/protocol_converged.md, amendment "
            f"5), by pre-training: {named}. Pre-trainings whose cells include both kinds: {mixed}.",
            "",
        ]


def _cell(row: Mapping[str, Any]) -> str:
    """The name of the row's fine-tuning cell ("" for a row without ``run_dir``)."""
    return Path(row.get("run_dir") or "").name


def _pretraining(row: Mapping[str, Any]) -> str | None:
    """The pre-training whose encoder the row's cell loaded (None: random initialisation)."""
    owner = METHODS[row["method"]].pretrain_method
    seed = row.get("pretrain_seed", "")
    return None if owner is None else pretrain_name(owner, 0 if seed in ("", None) else int(seed))


def restored_cells(experiments: Mapping[Path, Sequence[Mapping[str, Any]]]) -> RestoredCells:
    """
    The finished cells of the ``experiments`` (each folder with the rows of its ``results.csv`` that are analysed;
    one pre-training seed in one experiment only) that were fine-tuned from a restored encoder: those of a
    pre-training whose status records a restore (:py:data:`~experiments.gpu_session.kept_encoders.RESTORED_KEY`) and
    that had not finished when it was made. A restored pre-training none of the rows draws on (a seed left out by
    ``--pretrain-seeds``) is not named.

    Raises:
        ValueError: naming the ``results.csv``, when a pre-training was restored but a row of it has no ``run_dir``
            to tell its cell by.
    """
    cells: dict[str, set[str]] = {}
    first: set[str] = set()
    for experiment, rows in experiments.items():
        experiment = Path(experiment)
        drawn_on = {_pretraining(row) for row in rows}
        restores = {}
        for status_file in sorted(experiment.glob(f"pretrain/*/{STATUS_FILE}")):
            restore = read_status(status_file.parent).get(RESTORED_KEY)
            if restore is not None and status_file.parent.name in drawn_on:
                restores[status_file.parent.name] = set(restore["cells_finished"])
        cells.update({p: set() for p in restores})
        for row in rows if restores else ():
            pretraining = _pretraining(row)
            if pretraining not in restores or not finished_row(row):
                continue
            if not row.get("run_dir"):
                raise ValueError(
                    f"{experiment / 'results.csv'}: pre-training {pretraining} was restored but a row of "
                    f"{row['method']} has no run_dir to tell its cell by."
                )
            if _cell(row) in restores[pretraining]:
                first.add(pretraining)
            else:
                cells[pretraining].add(_cell(row))
    return RestoredCells(
        cells={p: tuple(sorted(c)) for p, c in cells.items()},
        mixed=tuple(p for p in cells if p in first and cells[p]),
    )


def _interval(d: SeedAwareDifference | None) -> str:
    if d is None:
        return "no pairs"
    return f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (S={d.seeds}, D={d.draws})"


def write_sensitivity(
    results: Sequence[Mapping[str, Any]], restored: RestoredCells, folder: Path, stem: str, document: str
) -> tuple[Path, Path]:
    """
    ``<stem>_without_restored.csv`` and ``.md`` in ``folder``: the primary comparisons (``results`` of
    :py:func:`~experiments.study.protocol.analyse` over the rows without the restored cells) as intervals, with what
    their tables lack; no verdict, since amendment 5 makes this a sensitivity analysis, not a further test.
    """
    rows = []
    for r in results:
        c, d = r["comparison"], r["difference"]
        interval = {k: getattr(d, k) if d else "" for k in ("mean", "low", "high", "df", "seeds", "draws")}
        rows.append({"method": c.method, "baseline": c.baseline, "num_labeled": c.num_labeled, **interval})
        rows[-1]["missing"] = r["missing"]
    csv_path = write_csv(Path(folder) / f"{stem}_without_restored.csv", rows)
    body = [
        [f"{r['comparison'].method} − {r['comparison'].baseline}", str(r["comparison"].num_labeled)]
        + [_interval(r["difference"]), r["missing"] or "complete"]
        for r in results
    ]
    lines = [
        f"# Sensitivity analysis of {document} (amendment 5): the primary comparisons without the cells fine-tuned "
        "from a restored encoder",
        "",
        "Not a further test: the intervals of the registered analysis's primary comparisons over its rows less those "
        "cells (a draw enters a comparison only where every pre-training seed has it).",
        "",
        *restored.lines(),
    ]
    lines += markdown_table(["comparison", "L", "difference", "table"], body)
    md_path = Path(folder) / f"{stem}_without_restored.md"
    md_path.write_text("\n".join(lines) + "\n")
    return csv_path, md_path
