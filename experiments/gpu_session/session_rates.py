"""
The fine-tuning throughput a ``gpu-run`` session reached, read from what it brought back: every cell's iterations
against wall time (the TensorBoard loss scalars, one every ``log_interval`` iterations, with their wall times),
summed over all cells in fixed windows, beside the pre-trainings' iterations in the same windows.

It answers whether cells running at once share the GPU's time or add to it: with ``n`` cells at ``t`` seconds per
iteration each, the aggregate is ``t / n`` seconds per iteration; compared with one process's bare step
(``speed_cuda.json``, ``finetune``) this says what running more cells at once buys.

    python -m experiments.gpu_session.session_rates RETURNED_OR_WORK \
        --out docs/results/gpu-default_acdc/lease1_finetune_rates.csv

``RETURNED_OR_WORK``: a folder of ``run.tgz.*`` parts (unpacked into a temporary folder) or a work folder. The CSV
has one row per window (``kind`` window) and one per cell (``kind`` cell).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from experiments.gpu_session.pack import ARCHIVE, extract
from experiments.report import scalar_events

__all__ = ["aggregate", "cell_rate", "iteration_times", "main"]

#: the fine-tuning bundles' TensorBoard tag of the training loss (train.json, ``TensorBoardStatsHandler``)
FINETUNE_TAG = "train_loss"


def iteration_times(tb_dir: Path, tag_filter: str = "loss") -> list[tuple[int, float]]:
    """(step, wall time) of every scalar whose tag contains ``tag_filter``, one per step (the last written)."""
    by_step: dict[int, float] = {}
    for tag, events in scalar_events(tb_dir).items():
        if tag_filter in tag:
            by_step.update({e.step: e.wall_time for e in events})
    return sorted(by_step.items())


def cell_rate(points: Sequence[tuple[int, float]]) -> float | None:
    """Seconds per iteration between a cell's first and last logged step (None with fewer than two)."""
    if len(points) < 2 or points[-1][0] == points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def aggregate(series: Iterable[Sequence[tuple[int, float]]], window: float) -> dict[float, int]:
    """
    Iterations of all ``series`` per window of ``window`` seconds: each interval between two logged steps of one
    series counts in the window where it ends.
    """
    counts: dict[float, int] = {}
    for points in series:
        for (step_a, _), (step_b, time_b) in zip(points, points[1:]):
            start = (time_b // window) * window
            counts[start] = counts.get(start, 0) + step_b - step_a
    return dict(sorted(counts.items()))


def _work_folder(source: Path, tmp: Path) -> Path:
    """``source`` itself, or (a folder of returned ``run.tgz.*`` parts) those parts extracted into ``tmp``."""
    if not any(source.glob(f"{ARCHIVE}.*")):
        return source
    extract(source, tmp / "work")
    return tmp / "work"


def _clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%H:%M:%S")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.gpu_session.session_rates", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("source", type=Path, help="a folder of run.tgz.* parts, or a gpu-run work folder")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    parser.add_argument("--window", type=float, default=15.0, help="seconds per window (default 15)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = _work_folder(args.source, Path(tmp))
        experiments = sorted(p for p in work.glob("results/*") if (p / "finetune").is_dir())
        if not experiments:
            raise SystemExit(f"{args.source}: no results/<experiment>/finetune folder.")
        cells = {
            cell.name: iteration_times(cell / "tensorboard", FINETUNE_TAG)
            for experiment in experiments
            for cell in sorted((experiment / "finetune").glob("*_L*"))
        }
        pretrainings = {
            folder.name: iteration_times(folder / "tensorboard")
            for experiment in experiments
            for folder in sorted((experiment / "pretrain").glob("*"))
        }
    finetune = aggregate([p for p in cells.values() if p], args.window)
    pretrain = aggregate([p for p in pretrainings.values() if p], args.window)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["kind", "name", "start_utc", "end_utc", "iterations", "seconds_per_iteration", "pretrain_steps"]
        )
        for start, count in finetune.items():
            seconds = args.window / count if count else ""
            writer.writerow(
                ["window", "", _clock(start), _clock(start + args.window), count, seconds, pretrain.get(start, 0)]
            )
        for name, points in cells.items():
            rate = cell_rate(points)
            if rate is not None:
                span = points[-1][0] - points[0][0]
                writer.writerow(["cell", name, _clock(points[0][1]), _clock(points[-1][1]), span, rate, ""])
    quiet = [args.window / n for start, n in finetune.items() if n and not pretrain.get(start)]
    print(f"{args.out}: {len(finetune)} windows, {len(cells)} cells")
    if quiet:
        print(f"windows without pre-training: median {1000 * statistics.median(quiet):.1f} ms per iteration, all cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
