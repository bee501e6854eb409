"""Summary of a recorded pre-training trajectory: loss trajectories against chance, spread, gradient conflict."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gcl_monai.losses import chance_level
from gcl_monai.utils import save_figure

__all__ = ["DiagnosisSummary", "summarise", "write_diagnosis"]

#: a healthy 128-D unit embedding spread evenly has std/img ~ 1 / sqrt(128) = 0.088; collapse is ~0.
COLLAPSE_STD = 1e-3


@dataclass
class DiagnosisSummary:
    """
    What a pre-training run did, averaged over its first and last window of iterations.

    ``labels`` maps each meta label (``"simclr"`` for None) to ``img_first``, ``img_last``, ``img_drop``,
    ``pix_first``, ``pix_last`` (NaN without the pixel branch) and ``below_chance``; ``pairs`` maps
    ``"<i> vs <j>"`` to the mean gradient cosine over the run and over the last window, the last EMA target, the
    mean fraction of parameters GradMitigator changed (``acted``); ``verdict`` is ``"collapsed"``,
    ``"stalled at chance: <labels>"`` and/or ``"above chance: <labels>"``, or ``"training"``.
    """

    iterations: int
    batch_size: int
    chance: float
    window: int
    labels: dict[str, dict[str, float | bool]]
    std_img: tuple[float, float]
    cos_img: tuple[float, float]
    pairs: dict[str, dict[str, float]] = field(default_factory=dict)
    change: float = math.nan
    verdict: str = ""
    mean_drop: float = math.nan
    reference: dict[str, float] = field(default_factory=dict)
    representation: dict[str, float] = field(default_factory=dict)
    positives: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_markdown(self) -> str:
        """The summary as markdown tables."""
        lines = [
            f"Iterations: {self.iterations}, batch {self.batch_size} images (2 views), chance ln(2B - 1) = "
            f"{self.chance:.3f}; first -> last window of {self.window} iterations.",
            "",
            f"**Verdict: {self.verdict}**",
            "",
            "| meta label | image-wise loss | drop | below chance | pixel-wise loss |",
            "|---|---|---|---|---|",
        ]
        for name, s in self.labels.items():
            pix = "–" if math.isnan(s["pix_first"]) else f"{s['pix_first']:.3f} -> {s['pix_last']:.3f}"
            below = "yes" if s["below_chance"] else "no"
            img = f"{s['img_first']:.3f} -> {s['img_last']:.3f}"
            lines.append(f"| {name} | {img} | {s['img_drop']:.3f} | {below} | {pix} |")
        lines += [
            "",
            f"Mean drop of the image-wise losses: {self.mean_drop:.3f}. `std/img` {self.std_img[0]:.4f} -> "
            f"{self.std_img[1]:.4f}; mean pairwise cosine of the image embeddings (`cos/img`) {self.cos_img[0]:.3f} "
            f"-> {self.cos_img[1]:.3f}.",
        ]
        if self.reference:
            lines.append(
                f"Against the reference run: mean drop {self.reference['drop_ratio']:.2f}x, `std/img` "
                f"{self.reference['std_ratio']:.2f}x."
            )
        if self.representation:
            r = self.representation
            lines += [
                "",
                f"Representation at the end ({r['num_images']} images, two views; label-free): effective rank "
                f"(RankMe) {r['rank/img']:.1f} of {r['dim/img']} (image-wise embeddings), {r['rank/features']:.1f} of "
                f"{r['dim/features']} (pooled encoder output); alignment {r['alignment/img']:.3f} (0: views "
                f"identical); uniformity {r['uniformity/img']:.3f} (0: collapsed, lower: more spread).",
            ]
            if "probe_dice" in r:
                lines.append(
                    f"Probe Dice at the last evaluation (gcl_monai.probe, cross-validated): {r['probe_dice']:.3f}."
                )
        if self.positives:
            lines += [
                "",
                f"Positives of another image per anchor in a batch of {self.batch_size} "
                "(`gcl_monai.diagnose.positives`: expected for uniform batches, counted in the sampler's batches for "
                "grouped ones; without one, a meta label's loss is SimCLR's for that anchor):",
                "",
                "| meta label | other images with the anchor's label | anchors with at least one |",
                "|---|---|---|",
            ]
            for name, s in self.positives.items():
                lines.append(f"| {name} | {s['mean']:.2f} | {s['share']:.0%} |")
        if self.pairs:
            lines += [
                "",
                f"GradMitigator: mean relative change of the update {self.change:.3f}.",
                "",
                "| g_i vs g_j | cosine (run mean) | cosine (last window) | EMA target (last) | acted (fraction) |",
                "|---|---|---|---|---|",
            ]
            for pair, s in self.pairs.items():
                cells = [s["cos_mean"], s["cos_last"], s["target_last"], s["acted"]]
                lines.append(f"| {pair} | " + " | ".join(f"{v:.3f}" for v in cells) + " |")
        return "\n".join(lines) + "\n"


def _column(rows: Sequence[Mapping[str, float]], key: str) -> np.ndarray:
    return np.array([r.get(key, math.nan) for r in rows], dtype=float)


def summarise(
    rows: Sequence[Mapping[str, float]],
    task_names: Sequence[str],
    window_fraction: float = 0.1,
    stall_tol: float = 0.02,
    reference: DiagnosisSummary | Mapping | None = None,
) -> DiagnosisSummary:
    """
    Summarise the rows of a :py:class:`~gcl_monai.diagnose.TrajectoryRecorder`.

    An image-wise loss whose last-window mean is within ``stall_tol`` of :math:`\\ln(2B - 1)` is "stalled at
    chance": its meta label did not separate the images; one further above has not come down to chance yet (e.g. a
    head that spreads the embeddings at random at the start). The run is ``"collapsed"`` when the last-window
    ``std/img`` is below 1e-3 (all embeddings of a batch identical), else it names the labels stalled at or above
    chance, else it is ``"training"``.

    Args:
        rows: one dict of scalars per iteration (``iteration``, ``batch_size``, ``img/<name>``, ...).
        task_names: the meta labels' names, in the order of the combiner's task indices.
        window_fraction: length of the first/last windows as a fraction of the run (at least one iteration).
        stall_tol: distance to chance below which an image-wise loss counts as at chance.
        reference: the summary of a reference run (e.g. SimCLR in the same setting) to compare the mean drop and
            ``std/img`` with.

    Raises:
        ValueError: when ``rows`` is empty.
    """
    if not rows:
        raise ValueError("no iterations were recorded.")
    n = len(rows)
    window = max(1, int(round(n * window_fraction)))
    batch = int(rows[0]["batch_size"])
    chance = chance_level(batch)

    def first_last(key: str) -> tuple[float, float]:
        values = _column(rows, key)
        return float(np.nanmean(values[:window])), float(np.nanmean(values[-window:]))

    labels = {}
    for name in task_names:
        img = first_last(f"img/{name}")
        pix = first_last(f"pix/{name}") if f"pix/{name}" in rows[-1] else (math.nan, math.nan)
        labels[name] = {
            "img_first": img[0],
            "img_last": img[1],
            "img_drop": img[0] - img[1],
            "pix_first": pix[0],
            "pix_last": pix[1],
            "below_chance": bool(img[1] < chance - stall_tol),
        }
    pairs = {}
    for i, name_i in enumerate(task_names):
        for j, name_j in enumerate(task_names):
            if i == j or f"cos_{i}_{j}" not in rows[-1]:
                continue
            cos = _column(rows, f"cos_{i}_{j}")
            pairs[f"{name_i} vs {name_j}"] = {
                "cos_mean": float(np.nanmean(cos)),
                "cos_last": float(np.nanmean(cos[-window:])),
                "target_last": float(rows[-1].get(f"target_{i}_{j}", math.nan)),
                "acted": float(np.nanmean(_column(rows, f"acted_{i}_{j}"))),
            }
    std = first_last("std/img")
    at_chance = [name for name, s in labels.items() if abs(s["img_last"] - chance) <= stall_tol]
    above = [name for name, s in labels.items() if s["img_last"] > chance + stall_tol]
    if std[1] < COLLAPSE_STD:
        verdict = "collapsed"
    elif at_chance or above:
        parts = [f"stalled at chance: {', '.join(at_chance)}"] if at_chance else []
        parts += [f"above chance: {', '.join(above)}"] if above else []
        verdict = "; ".join(parts)
    else:
        verdict = "training"
    summary = DiagnosisSummary(
        iterations=n,
        batch_size=batch,
        chance=chance,
        window=window,
        labels=labels,
        std_img=std,
        cos_img=first_last("cos/img"),
        pairs=pairs,
        change=float(np.nanmean(_column(rows, "change"))) if "change" in rows[-1] else math.nan,
        verdict=verdict,
        mean_drop=float(np.mean([s["img_drop"] for s in labels.values()])),
    )
    if reference is not None:
        ref = asdict(reference) if isinstance(reference, DiagnosisSummary) else dict(reference)
        summary.reference = {
            "drop_ratio": summary.mean_drop / ref["mean_drop"],
            "std_ratio": summary.std_img[1] / ref["std_img"][1],
        }
    return summary


def _plot(rows: Sequence[Mapping[str, float]], summary: DiagnosisSummary, path: Path) -> None:
    from matplotlib.figure import Figure

    steps = _column(rows, "iteration")
    fig = Figure(figsize=(16, 4), layout="constrained")
    axes = [fig.add_subplot(1, 4, k + 1) for k in range(4)]
    for name in summary.labels:
        axes[0].plot(steps, _column(rows, f"img/{name}"), label=name)
        if not math.isnan(summary.labels[name]["pix_first"]):
            axes[1].plot(steps, _column(rows, f"pix/{name}"), label=name)
    axes[0].axhline(summary.chance, color="k", ls=":", lw=1, label="ln(2B-1)")
    axes[2].plot(steps, _column(rows, "std/img"), label="std/img")
    axes[2].plot(steps, _column(rows, "cos/img"), label="cos/img")
    for pair in summary.pairs:
        i, j = (list(summary.labels).index(n) for n in pair.split(" vs "))
        axes[3].plot(steps, _column(rows, f"cos_{i}_{j}"), label=f"cos {pair}")
    titles = ("image-wise losses (chance dotted)", "pixel-wise losses", "embedding spread", "gradient cosines")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize="medium")
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="x-small")
    save_figure(fig, path, dpi=110)


def write_diagnosis(
    folder: str | Path, rows: Sequence[Mapping[str, float]], summary: DiagnosisSummary, header: str = ""
) -> Path:
    """
    Write ``trajectory.csv`` (one row per iteration), ``summary.json``, ``report.md`` (``header`` then the tables)
    and ``curves.png`` (when matplotlib is installed) into ``folder``; returns the report's path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k != "iteration", k))
    with open(folder / "trajectory.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    (folder / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    report = folder / "report.md"
    report.write_text(header + summary.to_markdown())
    try:
        _plot(rows, summary, folder / "curves.png")
    except ImportError:
        pass
    return report
