"""
Benchmark report: ``results.csv`` -> the paper's table (mean ± std of Dice over the repeats), the same next to the
paper's numbers, paired differences to the baselines (``random`` and ``simclr`` unless chosen) with 95% t-intervals,
per-class Dice, a summary of what each pre-training learned, and the plots ``dice_vs_L.png`` and
``pretrain_curves.png``.
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from experiments.paper_results import FULLY_SUPERVISED_L, PAPER_DICE, paper_dice
from experiments.plan import read_plan
from experiments.presets import ALL_LABELLED, METHODS
from experiments.study.power import ALPHA, POWER, detectable_difference, pairs_needed, spread
from gcl_monai.diagnose import encoder_weight_ranks, summarise
from gcl_monai.losses import chance_level
from gcl_monai.utils import save_figure

__all__ = [
    "VALIDATION_SET",
    "PairedDifference",
    "finished_row",
    "markdown_report",
    "markdown_table",
    "paired_difference",
    "paired_values",
    "pretraining_summary",
    "read_results",
    "read_pretrain_scalars",
    "read_scalars",
    "scalar_events",
    "write_report",
]

logger = logging.getLogger("experiments")

#: the methods whose paired differences the report shows by default (``report --baselines`` chooses others).
BASELINES = ("random", "simclr")
#: true differences of Dice for which the report gives the pairs needed (``report --power-differences``)
POWER_DIFFERENCES = (0.03, 0.05)
#: ``test_set`` of the rows that hold the validation patients' Dice (``results.csv``), on which recipes are chosen
VALIDATION_SET = "val"
INT_COLUMNS = ("num_labeled", "repeat", "draw", "seed")
#: the evaluation variants of a test set's Dice (``results.csv`` columns, from ``dice.json``'s ``dice_ed`` and
#: ``dice_pooled_2d``) with their names in the report: the primary ``dice`` is 3D per volume over ED and ES
VARIANT_COLUMNS = {"ed_dice": "end-diastole only (GLCL)", "pooled_2d_dice": "pooled 2D (PCL)"}


@dataclass(frozen=True)
class PairedDifference:
    """
    Mean of paired differences with its 95% t-interval (NaN bounds with fewer than two pairs), and in how many of
    the ``n`` pairs the method is higher than its baseline.
    """

    mean: float
    low: float
    high: float
    n: int
    higher: int = 0

    def __str__(self) -> str:
        if self.n == 0:
            return "–"
        if self.n == 1:
            return f"{self.mean:+.3f} (n=1, {self.higher} higher)"
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}] (n={self.n}, {self.higher} higher)"


def paired_difference(values: Sequence[float], baseline: Sequence[float]) -> PairedDifference:
    """
    ``values - baseline`` paired element-wise: mean and 95% interval ``mean ± t_{0.975, n-1} s / sqrt(n)``.

    Args:
        values: Dice of a method, one per (draw, seed).
        baseline: Dice of the baseline on the same (draw, seed), in the same order.
    """
    if len(values) != len(baseline):
        raise ValueError(f"paired samples differ in length: {len(values)} and {len(baseline)}.")
    d = np.asarray(values, dtype=float) - np.asarray(baseline, dtype=float)
    if len(d) == 0:
        return PairedDifference(math.nan, math.nan, math.nan, 0)
    mean, higher = float(d.mean()), int((d > 0).sum())
    if len(d) == 1:
        return PairedDifference(mean, math.nan, math.nan, 1, higher)
    half = float(stats.t.ppf(0.975, len(d) - 1)) * float(stats.sem(d))
    return PairedDifference(mean, mean - half, mean + half, len(d), higher)


def _parse(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = dict(row)
    for key in INT_COLUMNS:
        out[key] = int(row[key])
    for key in [*row, *VARIANT_COLUMNS]:
        if key == "dice" or key.startswith("dice_") or key in VARIANT_COLUMNS:
            out[key] = float(row[key]) if row.get(key) not in ("", None) else math.nan
    return out


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``results.csv`` (integers and Dice values parsed)."""
    with Path(path).open(newline="") as f:
        return [_parse(row) for row in csv.DictReader(f)]


def finished_row(row: Mapping[str, Any]) -> bool:
    """Whether a ``results.csv`` row is of a cell that finished: ``status`` ok and a finite Dice."""
    return row["status"] == "ok" and math.isfinite(row["dice"])


def _select(rows: Iterable[Mapping[str, Any]], method: str, num_labeled: int, test_set: str) -> list[Mapping[str, Any]]:
    return [r for r in rows if r["method"] == method and r["num_labeled"] == num_labeled and r["test_set"] == test_set]


def _by_repeat(rows: Iterable[Mapping[str, Any]], key: str) -> dict[tuple[int, int], float]:
    """``(draw, seed) -> value`` of the finished rows, averaged over a method's pre-training seeds."""
    values: dict[tuple[int, int], list[float]] = {}
    for r in rows:
        if finished_row(r):
            values.setdefault((r["draw"], r["seed"]), []).append(r[key])
    return {k: float(np.mean(v)) for k, v in values.items()}


def paired_values(
    rows: Sequence[Mapping[str, Any]], method: str, baseline: str, num_labeled: int, test_set: str, key: str = "dice"
) -> tuple[list[float], list[float]]:
    """
    Values of ``method`` and ``baseline`` on the (draw, seed) pairs where both finished (``status`` ok); a method
    pre-trained with several seeds gives the mean over them on each pair, so these pairs carry no variance of the
    pre-training seed: :py:mod:`experiments.study.intervals` gives the interval that does.
    """
    ours = _by_repeat(_select(rows, method, num_labeled, test_set), key)
    theirs = _by_repeat(_select(rows, baseline, num_labeled, test_set), key)
    keys = sorted(set(ours) & set(theirs))
    return [ours[k] for k in keys], [theirs[k] for k in keys]


def _mean_std_cell(rows: Sequence[Mapping[str, Any]], planned: int, key: str = "dice") -> str:
    """``mean ± std`` over the repeats (sample std), with the count when some are missing, failed or collapsed."""
    if rows and all(r["status"] == "collapsed" for r in rows):
        return "collapsed"
    values = [r[key] for r in rows if finished_row(r) and math.isfinite(r[key])]
    if not values:
        return "–" if not rows else "failed"
    text = f"{np.mean(values):.3f}" + (f" ± {np.std(values, ddof=1):.3f}" if len(values) > 1 else "")
    notes = [] if len(values) == planned else [f"n={len(values)} of {planned}"]
    bad = sum(not finished_row(r) for r in rows)  # a finished cell without a variant is only left out of n
    if bad:
        notes.append(f"{bad} failed or collapsed")
    return text + (f" ({', '.join(notes)})" if notes else "")


def _columns(plan: Mapping[str, Any]) -> list[int]:
    """The values of L of the tables: the preset's, then ``ALL_LABELLED`` when a method is fully supervised."""
    ls = list(plan["preset"]["num_labeled"])
    if any(METHODS[m].fully_supervised for m in plan["methods"] if m in METHODS):
        ls.append(ALL_LABELLED)
    return ls


def _l_name(num_labeled: int) -> str:
    return "L=all" if num_labeled == ALL_LABELLED else f"L={num_labeled}"


def _paper_cell(dataset: str, method: str, num_labeled: int) -> str:
    key = "all" if num_labeled == ALL_LABELLED else num_labeled
    value = paper_dice(dataset, method, key)
    if value is None:
        return "–"
    text = f"{value[0]:.3f} ± {value[1]:.3f}"
    return text + (f" (L={FULLY_SUPERVISED_L[dataset]})" if key == "all" else "")


def markdown_table(header: Sequence[str], body: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend("| " + " | ".join(row) + " |" for row in body)
    return lines


def _test_sets(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["test_set"] for r in rows))


def _resolution_cell(values: Sequence[float], baseline: Sequence[float], targets: Sequence[float]) -> str:
    """``sd 0.051: ±0.073; ±0.03 needs 25`` for the paired differences ``values - baseline``."""
    sd = spread(np.asarray(values, dtype=float) - np.asarray(baseline, dtype=float))
    if math.isnan(sd):
        return "–"
    needed = "; ".join(f"±{t:.2f} needs {pairs_needed(sd, t) or '–'}" for t in targets)
    return f"sd {sd:.3f}: ±{detectable_difference(sd, len(values)):.3f}" + (f"; {needed}" if needed else "")


def markdown_report(
    rows: Sequence[Mapping[str, Any]],
    plan: Mapping[str, Any],
    baselines: Sequence[str] = BASELINES,
    power_differences: Sequence[float] = POWER_DIFFERENCES,
) -> str:
    """
    The Markdown report: for each test set, Dice per method (rows) and L (columns) as ``mean ± std`` over all
    repeats, the paired differences to each of ``baselines`` that the experiment has with what those pairs can
    resolve (:py:mod:`experiments.study.power`), and the per-class Dice.

    Args:
        rows: rows of ``results.csv`` (see :py:func:`read_results`).
        plan: the experiment's ``plan.json``.
        baselines: methods to pair every other method with (e.g. ``gcl`` for the semi-supervised rows on top of it).
        power_differences: true differences for which the report gives the pairs needed (empty: no power table).
    """
    preset = plan["preset"]
    methods, labels, ls = plan["methods"], plan["labels"], _columns(plan)
    planned = preset["repeats"] * preset["seeds_per_draw"]
    source = "" if plan["pretrain_data"] == plan["data"] else f" (pre-trained on {plan['pretrain_data']})"
    protocol = (
        f"Preset `{preset['name']}`: {preset['repeats']} labelled draws x {preset['seeds_per_draw']} fine-tuning "
        "seed(s) per L, the same draws and seeds for every method; every repeat is included."
    )
    cuts = " What it cuts relative to the paper:" if plan["cuts"] else " The paper's protocol."
    lines = [f"# Benchmark `{plan['name']}`: {plan['data']}{source}", "", protocol + cuts, ""]
    lines += [f"- {c}" for c in plan["cuts"]]
    for test_set in _test_sets(rows):
        volumes = sorted({str(r["num_test_volumes"]) for r in rows if r["test_set"] == test_set and finished_row(r)})
        validation = test_set == VALIDATION_SET
        lines += [
            "",
            f"## Dice on the `{test_set}` set ({', '.join(volumes) or '?'} volumes)",
            "",
            "Mean ± standard deviation over the repeats (paper format)"
            + (
                " of the validation Dice at the end of fine-tuning, the figure on which recipes are chosen (the "
                "kept model is the best of the validations; its test Dice is the one above)."
                if validation
                else "."
            ),
            "",
        ]
        lines += markdown_table(
            ["Method", *[_l_name(n) for n in ls]],
            ([labels[m], *[_mean_std_cell(_select(rows, m, n, test_set), planned) for n in ls]] for m in methods),
        )
        if plan["pretrain_data"] == plan["data"] and plan["data"] in PAPER_DICE and not validation:
            lines += [
                "",
                f"### Next to the paper (`{test_set}`)",
                "",
                "This experiment's mean ± std, then the paper's (Tables 1, 3 and 4 of the GCL paper: 5 runs, its own "
                "protocol and budget; see the cuts above). The paper reports L = 1, 2, 8 and a fully supervised row.",
                "",
            ]
            lines += markdown_table(
                ["Method", *[f"{_l_name(n)} {who}" for n in ls for who in ("here", "paper")]],
                (
                    [
                        labels[m],
                        *[
                            c
                            for n in ls
                            for c in (
                                _mean_std_cell(_select(rows, m, n, test_set), planned),
                                _paper_cell(plan["data"], m, n),
                            )
                        ],
                    ]
                    for m in methods
                ),
            )
        for baseline in (b for b in baselines if b in methods):
            lines += [
                "",
                f"### Paired difference to {labels[baseline]} (`{test_set}`)",
                "",
                f"Dice(method) − Dice({labels[baseline]}) on the same labelled draw and seed: mean [95% t-interval] "
                "over the n pairs, and in how many of them the method is higher. An interval that excludes 0 is a "
                "difference this experiment resolves.",
                "",
            ]
            lines += markdown_table(
                ["Method", *[_l_name(n) for n in ls]],
                (
                    [labels[m], *[str(paired_difference(*paired_values(rows, m, baseline, n, test_set))) for n in ls]]
                    for m in methods
                    if m != baseline
                ),
            )
            if power_differences:
                targets = ", ".join(f"±{t:.2f}" for t in power_differences)
                lines += [
                    "",
                    f"What these pairs resolve: the standard deviation of the paired differences, the smallest true "
                    f"difference that this many pairs detect with {POWER:.0%} power (two-sided paired t-test at "
                    f"{ALPHA:.0%}), and the pairs needed, at this spread, for a true difference of {targets}.",
                    "",
                ]
                lines += markdown_table(
                    ["Method", *[_l_name(n) for n in ls]],
                    (
                        [
                            labels[m],
                            *[
                                _resolution_cell(*paired_values(rows, m, baseline, n, test_set), power_differences)
                                for n in ls
                            ],
                        ]
                        for m in methods
                        if m != baseline
                    ),
                )
        lines += _variants_table(rows, methods, labels, ls, test_set, planned)
        classes = [k[len("dice_") :] for k in (rows[0] if rows else {}) if k.startswith("dice_")]
        if classes and not validation:  # the validation Dice is the trainer's mean over the classes
            lines += ["", f"### Dice per class (`{test_set}`), mean over the repeats", ""]
            lines += markdown_table(
                ["Method", *[f"{_l_name(n)} {c}" for n in ls for c in classes]],
                (
                    [labels[m], *[_class_mean(_select(rows, m, n, test_set), c) for n in ls for c in classes]]
                    for m in methods
                ),
            )
    return "\n".join(lines) + "\n"


def _variants_table(
    rows: Sequence[Mapping[str, Any]],
    methods: Sequence[str],
    labels: Mapping[str, str],
    ls: Sequence[int],
    test_set: str,
    planned: int,
) -> list[str]:
    """The primary Dice beside its evaluation variants (:data:`VARIANT_COLUMNS`) per method and L; nothing when no
    row of ``test_set`` has a variant (the validation rows, results written before the variants)."""
    selected = [r for r in rows if r["test_set"] == test_set]
    if not any(math.isfinite(r.get(k, math.nan)) for r in selected for k in VARIANT_COLUMNS):
        return []
    lines = [
        "",
        f"### Evaluation variants (`{test_set}`)",
        "",
        "The same predictions scored three ways, mean ± std over the repeats: the primary Dice (3D per volume, "
        "end-diastole and end-systole volumes), "
        + ", ".join(VARIANT_COLUMNS.values())
        + " (one Dice per class over every slice of the test set).",
        "",
    ]
    names = {"dice": "primary", **VARIANT_COLUMNS}
    return lines + markdown_table(
        ["Method", *[f"{_l_name(n)} {names[k].split(' (')[0]}" for n in ls for k in names]],
        (
            [labels[m], *[_mean_std_cell(_select(rows, m, n, test_set), planned, key=k) for n in ls for k in names]]
            for m in methods
        ),
    )


def _class_mean(rows: Sequence[Mapping[str, Any]], name: str) -> str:
    values = [r[f"dice_{name}"] for r in rows if finished_row(r) and math.isfinite(r[f"dice_{name}"])]
    return f"{np.mean(values):.3f}" if values else "–"


def scalar_events(tb_dir: str | Path) -> dict[str, list[Any]]:
    """
    The scalar events of the TensorBoard event files in ``tb_dir`` (step, wall time, value): ``tag -> events`` sorted
    by step, one per step (the last written, so a resumed run's repeated steps count once); empty when there are none.
    """
    if not Path(tb_dir).is_dir():
        return {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    out = {}
    for tag in accumulator.Tags()["scalars"]:
        by_step = {e.step: e for e in accumulator.Scalars(tag)}
        out[tag] = [by_step[step] for step in sorted(by_step)]
    return out


def read_scalars(tb_dir: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The scalars of :py:func:`scalar_events`: ``tag -> (steps, values)`` sorted by step."""
    return {
        tag: (np.array([e.step for e in events]), np.array([e.value for e in events], dtype=float))
        for tag, events in scalar_events(tb_dir).items()
    }


def _colours(methods: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(methods) <= 10 else "tab20"]
    return {m: cmap(i) for i, m in enumerate(methods)}


def plot_dice_vs_l(rows: Sequence[Mapping[str, Any]], plan: Mapping[str, Any], path: Path) -> Path:
    """Dice vs L per method (mean ± std over the repeats, and every repeat as a faint dot), one panel per test set."""
    from matplotlib.figure import Figure

    methods, labels, ls = plan["methods"], plan["labels"], _columns(plan)
    test_sets = _test_sets(rows) or ["test"]
    colours = _colours(methods)
    fig = Figure(figsize=(5.5 * len(test_sets), 4.2), layout="constrained")
    for k, test_set in enumerate(test_sets):
        ax = fig.add_subplot(1, len(test_sets), k + 1)
        for i, method in enumerate(methods):
            offset = (i - (len(methods) - 1) / 2) * 0.06
            xs, means, stds = [], [], []
            for j, n in enumerate(ls):
                values = [r["dice"] for r in _select(rows, method, n, test_set) if finished_row(r)]
                if values:
                    ax.plot([j + offset] * len(values), values, ".", color=colours[method], alpha=0.3)
                    xs.append(j + offset)
                    means.append(np.mean(values))
                    stds.append(np.std(values, ddof=1) if len(values) > 1 else 0.0)
            if xs:
                ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, color=colours[method], label=labels[method])
        ax.set_xticks(range(len(ls)), [_l_name(n) for n in ls])
        ax.set_ylabel("Dice")
        ax.set_title(f"{plan['data']}: {test_set} set")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    save_figure(fig, path, dpi=120)
    return path


def _smooth(values: np.ndarray) -> np.ndarray:
    window = max(1, len(values) // 50)
    return np.convolve(values, np.ones(window) / window, mode="valid")


def read_pretrain_scalars(folder: str | Path, plan: Mapping[str, Any]) -> dict[str, dict]:
    """:py:func:`read_scalars` of every pre-training of the experiment that logged a loss, by method."""
    curves = {m: read_scalars(Path(folder) / "pretrain" / m / "tensorboard") for m in plan["pretrain"]}
    return {m: c for m, c in curves.items() if "loss" in c}


def read_encoder_ranks(folder: str | Path, plan: Mapping[str, Any]) -> dict[str, tuple[float, int]]:
    """
    ``{method: (effective rank, maximum rank)}`` of the deepest convolution of each exported pre-trained encoder
    (``pretrain/<method>/encoder.pt``; :py:func:`gcl_monai.diagnose.encoder_weight_ranks`).
    """
    ranks = {}
    for method in plan["pretrain"]:
        path = Path(folder) / "pretrain" / method / "encoder.pt"
        if path.is_file():
            per_layer = encoder_weight_ranks(torch.load(path, map_location="cpu", weights_only=True))
            if per_layer:
                ranks[method] = list(per_layer.values())[-1]
    return ranks


def plot_pretrain_curves(curves: Mapping[str, dict], plan: Mapping[str, Any], path: Path) -> Path | None:
    """
    Pre-training curves per method (``curves``: :py:func:`read_pretrain_scalars`): the total loss, the mean
    image-wise loss with the collapse level :math:`\\ln(2B - 1)`, and ``std/img`` (near 0 when the embeddings
    collapse).
    """
    from matplotlib.figure import Figure

    if not curves:
        return None
    colours = _colours(list(plan["pretrain"]))
    fig = Figure(figsize=(15, 4.2), layout="constrained")
    axes = [fig.add_subplot(1, 3, k + 1) for k in range(3)]
    for method, scalars in curves.items():
        colour = colours[method]
        steps, loss = scalars["loss"]
        axes[0].plot(steps[: len(_smooth(loss))], _smooth(loss), color=colour, label=method)
        img = [scalars[t][1] for t in scalars if t.startswith("img/")]
        if img:
            size = min(len(v) for v in img)
            mean_img = np.mean([v[:size] for v in img], axis=0)
            axes[1].plot(scalars["loss"][0][: len(_smooth(mean_img))], _smooth(mean_img), color=colour, label=method)
            batch = plan["pretrain"][method]["overrides"].get("batch_size")
            if batch:
                axes[1].axhline(chance_level(batch), color=colour, ls=":", lw=1)
        if "std/img" in scalars:
            s_steps, std = scalars["std/img"]
            axes[2].plot(s_steps[: len(_smooth(std))], _smooth(std), color=colour, label=method)
    axes[2].axhline(1e-3, color="k", ls=":", lw=1)
    titles = (
        "loss (mean over meta labels)",
        "image-wise loss (mean over meta labels); ln(2B-1) dotted",
        "std/img (collapse below the dotted line)",
    )
    for ax, title in zip(axes, titles):
        ax.set_xlabel("iteration")
        ax.set_title(title, fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    axes[0].set_yscale("log")
    axes[2].set_yscale("log")
    save_figure(fig, path, dpi=120)
    return path


def _rows(scalars: Mapping[str, tuple[np.ndarray, np.ndarray]], batch_size: int) -> list[dict[str, float]]:
    """TensorBoard scalars (tag -> (steps, values)) as one dict per logged iteration, for the diagnosis summary."""
    by_step: dict[int, dict[str, float]] = {}
    for tag, (steps, values) in scalars.items():
        for step, value in zip(steps, values):
            by_step.setdefault(int(step), {"iteration": int(step), "batch_size": batch_size})[tag] = float(value)
    return [by_step[step] for step in sorted(by_step)]


def pretraining_summary(
    curves: Mapping[str, dict], plan: Mapping[str, Any], ranks: Mapping[str, tuple[float, int]] | None = None
) -> list[str]:
    """
    Markdown section saying, for each pre-training of the experiment, whether its objectives learned: the
    verdict and the first/last-window means of :py:func:`gcl_monai.diagnose.summarise` (the same judgement as
    ``python -m gcl_monai.diagnose``) on its TensorBoard scalars: each image-wise loss (Eq. 1) against the chance
    level :math:`\\ln(2B - 1)` (every embedding of the batch identical), each pixel-wise loss (Eq. 5) and
    ``std/img``. This is reported, not acted on: the encoder is still fine-tuned (its other losses, e.g. the
    pixel-wise ones, may have learned) and the Dice shows the consequence.

    Args:
        curves: the pre-trainings' scalars by method, :py:func:`read_pretrain_scalars`.
        plan: the experiment's ``plan.json``.
        ranks: effective rank of the deepest encoder convolution by method, :py:func:`read_encoder_ranks`.
    """
    ranks = ranks or {}
    body = []
    for method, scalars in curves.items():
        batch = plan["pretrain"][method]["overrides"].get("batch_size")
        names = [t[len("img/") :] for t in scalars if t.startswith("img/")]
        if not batch or not names:
            continue
        summary = summarise(_rows(scalars, batch), names)
        labels = summary.labels
        pix = [
            f"{k}: {s['pix_first']:.3f} → {s['pix_last']:.3f}"
            for k, s in labels.items()
            if not math.isnan(s["pix_first"])
        ]
        body.append(
            [
                method,
                str(summary.iterations),
                "<br>".join(f"{k}: {s['img_first']:.3f} → {s['img_last']:.3f}" for k, s in labels.items()),
                f"{summary.chance:.3f}",
                "<br>".join(pix) or "–",
                f"{summary.std_img[0]:.3f} → {summary.std_img[1]:.3f}",
                f"{ranks[method][0]:.0f} of {ranks[method][1]}" if method in ranks else "–",
                summary.verdict if summary.verdict == "training" else f"**{summary.verdict}**",
            ]
        )
    if not body:
        return []
    return [
        "",
        "## What each pre-training learned",
        "",
        (
            "Losses averaged over the first → last tenth of the iterations; verdict as in `python -m "
            "gcl_monai.diagnose` (docs/recipe.md): an image-wise loss that ends within 0.02 of ln(2B − 1) is stalled "
            "at chance (it did not separate the images of a batch); `std/img` is the spread of the normalised "
            "image-wise representations (about 0.088 for 128-D unit vectors spread evenly, below 0.001 collapsed); "
            "`deepest conv rank` is the effective rank of the exported encoder's last convolution weight (a fresh "
            "initialisation is close to the maximum; a small fraction of it is a dimensional collapse of the weights "
            "that fine-tuning inherits, docs/recipe.md)."
        ),
        "",
        *markdown_table(
            [
                "Pre-training",
                "iterations",
                "image-wise losses",
                "ln(2B−1)",
                "pixel-wise losses",
                "std/img",
                "deepest conv rank",
                "verdict",
            ],
            body,
        ),
    ]


def write_report(
    folder: str | Path, baselines: Sequence[str] = BASELINES, power_differences: Sequence[float] = POWER_DIFFERENCES
) -> Path:
    """
    Writes ``table.md``, ``dice_vs_L.png`` and ``pretrain_curves.png`` of the experiment in ``folder`` from its
    ``results.csv`` and ``plan.json``, with the paired differences to each of ``baselines`` and the pairs needed
    for ``power_differences`` (:py:func:`markdown_report`).

    Returns:
        the path of ``table.md``.
    """
    folder = Path(folder)
    plan = read_plan(folder)
    csv_path = folder / "results.csv"
    rows = read_results(csv_path) if csv_path.exists() else []
    table = folder / "table.md"
    curves = read_pretrain_scalars(folder, plan)
    summary = pretraining_summary(curves, plan, read_encoder_ranks(folder, plan))
    report = markdown_report(rows, plan, baselines, power_differences)
    table.write_text(report + "".join(f"{line}\n" for line in summary))
    plot_dice_vs_l(rows, plan, folder / "dice_vs_L.png")
    plot_pretrain_curves(curves, plan, folder / "pretrain_curves.png")
    logger.info("Report written to %s.", table)
    return table
