"""
Paired comparison across experiments: the same fine-tuning cells (method, L, labelled draw, seed and pre-training
seed) run in several experiments whose settings differ, e.g. a sweep of one override (``--finetune-set
consistency_weight=W``, one experiment per value), each paired cell by cell with a reference experiment. It is the
table a setting is chosen on, on the validation patients by default::

    python -m experiments compare --names cpu-semi_acdc cpu-semi-w03_acdc cpu-semi-w10_acdc --baseline random

What differs between the experiments is read from the settings each cell recorded when it trained (its
``benchmark.json``), not from the experiment names. Experiments on another dataset or split, or whose cells with the
same draw labelled other patients, are refused: their cells are not pairs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.plan import read_plan
from experiments.presets import ALL_LABELLED, METHODS
from experiments.report import finished_row, markdown_table, paired_difference, read_results
from experiments.reuse import same_split
from experiments.settings import SETTINGS_KEY, setting_differences
from experiments.status import read_status

__all__ = ["ComparedExperiment", "comparison_report", "load_experiment", "setting_changes"]

#: (method, L, labelled draw, fine-tuning seed, pre-training seed: None for a method without one)
CellKey = tuple[str, int, int, int, int | None]


@dataclass(frozen=True)
class ComparedExperiment:
    """
    The finished cells of one experiment, keyed by (method, num_labeled, draw, seed, pre-training seed), for one
    test set, with the settings each cell recorded when it trained (None for a cell that recorded none).
    """

    name: str
    folder: Path
    data: str
    cells: dict[CellKey, Mapping[str, Any]]
    settings: dict[CellKey, dict[str, Any] | None]


def load_experiment(folder: str | Path, test_set: str) -> ComparedExperiment:
    """
    The rows of ``folder/results.csv`` for ``test_set`` whose cell finished (``status`` ok, finite Dice), and the
    settings recorded in each cell's ``benchmark.json`` (``folder/finetune/<cell>``, wherever ``run_dir`` pointed).

    Raises:
        FileNotFoundError: when the folder has no ``plan.json``, ``split.json`` or ``results.csv``.
    """
    folder = Path(folder)
    for needed in ("plan.json", "split.json", "results.csv"):
        if not (folder / needed).exists():
            raise FileNotFoundError(f"{folder} holds no {needed}: not an experiment of the benchmark harness.")
    plan = read_plan(folder)
    cells = {
        (r["method"], r["num_labeled"], r["draw"], r["seed"], _pretrain_seed(r)): r
        for r in read_results(folder / "results.csv")
        if r["test_set"] == test_set and finished_row(r)
    }
    settings = {
        key: read_status(folder / "finetune" / Path(row["run_dir"]).name).get(SETTINGS_KEY) if row["run_dir"] else None
        for key, row in cells.items()
    }
    return ComparedExperiment(folder.name, folder, plan["data"], cells, settings)


def _pretrain_seed(row: Mapping[str, Any]) -> int | None:
    """A row's pre-training seed (``pretrain_seed``; None for random initialisation and rows from before the column)."""
    value = row.get("pretrain_seed", "")
    return None if value in ("", None) else int(value)


def _cell_name(draw: int, seed: int, pretrain_seed: int | None) -> str:
    """``d0s0``, with ``p<seed>`` for a pre-training seed above 0 (as the cells' folders are named)."""
    return f"d{draw}s{seed}" + (f"p{pretrain_seed}" if pretrain_seed else "")


def _check_comparable(reference: ComparedExperiment, other: ComparedExperiment) -> None:
    if other.data != reference.data:
        raise ValueError(f"{other.name} fine-tunes on {other.data}, {reference.name} on {reference.data}.")
    if not same_split(reference.folder / "split.json", other.folder / "split.json"):
        raise ValueError(f"{other.name} and {reference.name} hold different splits (split.json): no cell is a pair.")
    for key in sorted(set(reference.cells) & set(other.cells)):
        ours, theirs = reference.cells[key]["labelled_patients"], other.cells[key]["labelled_patients"]
        if ours != theirs:
            raise ValueError(
                f"{key[0]} L={key[1]} cell {_cell_name(*key[2:])} labels {ours} in {reference.name} but {theirs} in "
                f"{other.name}: the experiments' draws differ."
            )


def setting_changes(reference: ComparedExperiment, other: ComparedExperiment) -> dict[str, tuple[list, list]] | None:
    """
    The fine-tuning settings that differ between the paired cells of two experiments, as recorded by the cells
    (:py:func:`~experiments.settings.setting_differences`): ``{key: (values in reference, values in other)}``
    over all pairs whose both cells recorded their settings; None when no pair did.
    """
    changes: dict[str, tuple[list, list]] = {}
    compared = 0
    for key in sorted(set(reference.cells) & set(other.cells)):
        ours, theirs = reference.settings[key], other.settings[key]
        if ours is None or theirs is None:
            continue
        compared += 1
        for name, a, b in setting_differences(ours, theirs):
            left, right = changes.setdefault(name, ([], []))
            left.extend([a] if a not in left else [])
            right.extend([b] if b not in right else [])
    return changes if compared else None


def _show(values: Sequence[Any]) -> str:
    return "/".join(v if isinstance(v, str) else json.dumps(v) for v in values)


def _describe(changes: Mapping[str, tuple[list, list]] | None) -> str:
    if changes is None:
        return "no paired cell recorded its settings on both sides"
    if not changes:
        return "no recorded setting differs"
    return "; ".join(f"{name} {_show(a)} → {_show(b)}" for name, (a, b) in changes.items())


def _signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def _difference_cell(values: Sequence[float], baseline: Sequence[float]) -> str:
    """``+0.017 [−0.035, +0.069] (2 of 3)``, in bold when the interval excludes 0."""
    diff = paired_difference(values, baseline)
    if diff.n == 0:
        return "–"
    if diff.n == 1:
        return f"{_signed(diff.mean)} ({diff.higher} of 1)"
    text = f"{_signed(diff.mean)} [{_signed(diff.low)}, {_signed(diff.high)}] ({diff.higher} of {diff.n})"
    return f"**{text}**" if diff.low > 0 or diff.high < 0 else text


def _paired(
    a: ComparedExperiment, b: ComparedExperiment, method_a: str, method_b: str, num_labeled: int
) -> tuple[list[float], list[float]]:
    """
    Dice of ``method_a`` in ``a`` and of ``method_b`` in ``b`` on the cells both finished: the same (draw, seed) and
    pre-training seed, or, where ``method_b`` has no pre-training seed (random initialisation), its cell of that
    (draw, seed) for every pre-training seed of ``method_a``.
    """
    pairs = []
    for m, n, draw, seed, pre in sorted(a.cells, key=_order):
        if m != method_a or n != num_labeled:
            continue
        for partner in ((method_b, n, draw, seed, pre), (method_b, n, draw, seed, None)):
            if partner in b.cells:
                pairs.append((a.cells[(m, n, draw, seed, pre)]["dice"], b.cells[partner]["dice"]))
                break
    return [x for x, _ in pairs], [y for _, y in pairs]


def _order(key: CellKey) -> tuple:
    return (*key[:4], -1 if key[4] is None else key[4])


def comparison_report(
    experiments: Sequence[ComparedExperiment],
    test_set: str,
    methods: Sequence[str] | None = None,
    num_labeled: Sequence[int] | None = None,
    baseline: str | None = None,
) -> str:
    """
    Markdown: what differs from the reference (the first experiment), then per L a table with, for each method and
    experiment, the Dice per (draw, seed), its mean, the paired difference to the same method in the reference and,
    with ``baseline``, to the baseline method of the reference, each with its 95% t-interval and the count of pairs
    where it is better.

    Raises:
        ValueError: with fewer than two experiments, experiments that are not paired (see the module), a
            ``baseline`` the reference did not run, or ``methods`` that no experiment ran.
    """
    if len(experiments) < 2:
        raise ValueError("compare needs at least two experiments: a reference and one to pair with it.")
    reference, others = experiments[0], experiments[1:]
    for other in others:
        _check_comparable(reference, other)
    if baseline is not None and not any(k[0] == baseline for k in reference.cells):
        raise ValueError(f"the reference {reference.name} has no finished {baseline} cell on the {test_set} set.")
    all_cells = [k for e in experiments for k in e.cells]
    found = list(dict.fromkeys(k[0] for k in all_cells))
    missing = [m for m in methods or () if m not in found]
    if missing:
        raise ValueError(f"no finished cell of {', '.join(missing)} on the {test_set} set in these experiments.")
    methods = list(methods) if methods else found
    if baseline is not None:
        methods = [baseline] + [m for m in methods if m != baseline]
    ls = list(num_labeled) if num_labeled else sorted({k[1] for k in all_cells})
    lines = [
        f"# Paired comparison on the `{test_set}` set; reference `{reference.name}`",
        "",
        "Cells paired by (method, L, labelled draw, seed, pre-training seed). What each experiment changes against "
        "the reference, from the settings its cells recorded:",
        "",
    ]
    if any(k[4] for k in all_cells):
        lines += [
            "**Several pre-training seeds:** each seed's cell pairs with the same cell of a method without one (random "
            "initialisation), and these t-intervals treat the pairs as independent, so they are too narrow. The "
            "seed-aware intervals are `python -m experiments protocol`'s.",
            "",
        ]
    lines += [f"- `{o.name}`: {_describe(setting_changes(reference, o))}" for o in others]
    header = ["Method", "experiment", "Dice per (draw, seed)", "mean", f"− `{reference.name}`"]
    header += [f"− {baseline} of the reference"] if baseline else []
    for n in ls:
        body = []
        for method in methods:
            for experiment in experiments:
                keys = sorted((k for k in experiment.cells if k[:2] == (method, n)), key=_order)
                if not keys:
                    continue
                values = [experiment.cells[k]["dice"] for k in keys]
                per_draw = ", ".join(f"{_cell_name(*k[2:])} {v:.3f}" for k, v in zip(keys, values))
                label = METHODS[method].label if method in METHODS else method
                row = [label, f"`{experiment.name}`", per_draw, f"{np.mean(values):.3f}"]
                against_reference = _paired(experiment, reference, method, method, n)
                row.append("" if experiment is reference else _difference_cell(*against_reference))
                if baseline:
                    own = experiment is reference and method == baseline
                    row.append("" if own else _difference_cell(*_paired(experiment, reference, method, baseline, n)))
                body.append(row)
        if body:
            lines += ["", f"## L = {'all' if n == ALL_LABELLED else n}", ""] + markdown_table(header, body)
    return "\n".join(lines) + "\n"
