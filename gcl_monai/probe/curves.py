"""
Probe learning curves of several pre-trainings (their ``probe_history.jsonl``), as a Markdown table, a CSV and a
plot, with the mean over the runs of one method (``<method>`` and ``<method>_p<seed>`` folders):

    python -m gcl_monai.probe.curves RUN_DIR [RUN_DIR ...] --output_dir OUT [--reference NAME=probe.json ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gcl_monai.utils import save_figure

__all__ = ["chosen_length", "method_of", "read_history", "write_curves"]


def method_of(run: str | Path) -> str:
    """The method of a pre-training folder: ``gcl_p1`` -> ``gcl``."""
    return re.sub(r"_p\d+$", "", Path(run).name)


def read_history(run: str | Path) -> dict[int, float]:
    """``epoch -> probe Dice`` of a run's ``probe_history.jsonl`` (a resumed run's repeated epoch: its last line).

    Raises:
        FileNotFoundError: the run has no history, naming it.
    """
    path = Path(run) / "probe_history.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: pre-train with --probe_interval N.")
    return {int(h["epoch"]): float(h["dice"]) for h in map(json.loads, path.read_text().splitlines())}


def chosen_length(histories: Sequence[Mapping[int, float]]) -> int | None:
    """
    The pre-training length of one method by docs/protocol.md's rule (stage A, step 1): the probe evaluation with the
    highest mean probe Dice over the method's seeds, ties to the shorter; only epochs that every seed reached count.
    None when no epoch is common to all the seeds.
    """
    common = set.intersection(*(set(h) for h in histories)) if histories else set()
    if not common:
        return None
    return max(sorted(common), key=lambda e: (np.mean([h[e] for h in histories]), -e))


def write_curves(
    runs: Sequence[str | Path], output_dir: str | Path, references: Mapping[str, float] | None = None
) -> Path:
    """``curves.csv`` (run, method, epoch, dice), ``curves.md`` (Dice per epoch, each run and each method's mean)
    and ``curves.png`` (when matplotlib is installed) in ``output_dir``; ``references`` are horizontal lines
    (e.g. the random encoder's and the control's probe Dice). Returns the Markdown's path."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    histories = {Path(r).name: read_history(r) for r in runs}
    epochs = sorted({e for h in histories.values() for e in h})
    with open(out / "curves.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["run", "method", "epoch", "dice"])
        for name, h in histories.items():
            writer.writerows([name, method_of(name), e, d] for e, d in sorted(h.items()))
    methods: dict[str, list[dict[int, float]]] = {}
    for name, h in histories.items():
        methods.setdefault(method_of(name), []).append(h)
    header = "| run | " + " | ".join(f"epoch {e}" for e in epochs) + " |"
    lines = [
        "Probe Dice (cross-validated over the training patients) against pre-training epoch.",
        "",
        header,
        "|---|" + "---|" * len(epochs),
    ]
    for name, h in histories.items():
        lines.append(f"| {name} | " + " | ".join(f"{h[e]:.3f}" if e in h else "–" for e in epochs) + " |")
    for method, hs in methods.items():
        cells = []
        for e in epochs:
            values = [h[e] for h in hs if e in h]
            cells.append(f"{np.mean(values):.3f} (n={len(values)})" if values else "–")
        lines.append(f"| **{method}, mean** | " + " | ".join(cells) + " |")
    for name, value in (references or {}).items():
        lines.append(f"| {name} (reference) | " + " | ".join(f"{value:.3f}" for _ in epochs) + " |")
    lines += ["", "Length by docs/protocol.md's rule (the highest mean over the seeds, on the epochs all reached):", ""]
    for method, hs in methods.items():
        length = chosen_length(hs)
        lines.append(
            f"- {method}: " + (f"epoch {length} (seeds: {len(hs)})" if length else "no epoch common to the seeds")
        )
    md = out / "curves.md"
    md.write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return md
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, h in histories.items():
        ax.plot(sorted(h), [h[e] for e in sorted(h)], marker="o", label=name)
    for name, value in (references or {}).items():
        ax.axhline(value, linestyle="--", color="grey")
        ax.annotate(name, (epochs[0] if epochs else 0, value), fontsize=8)
    ax.set_xlabel("pre-training epoch")
    ax.set_ylabel("probe Dice (cross-validated)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "curves.png", dpi=120)
    plt.close(fig)
    return md


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcl_monai.probe.curves", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="pre-training folders holding probe_history.jsonl")
    parser.add_argument("--output_dir", required=True, type=Path)
    parser.add_argument(
        "--reference",
        nargs="*",
        default=[],
        metavar="NAME=PROBE_JSON",
        help="a probe.json drawn as a horizontal line (e.g. random=probe/random/probe.json)",
    )
    args = parser.parse_args(argv)
    references = {}
    for item in args.reference:
        name, _, path = item.partition("=")
        if not path:
            parser.error(f"--reference {item!r}: expected NAME=PROBE_JSON.")
        references[name] = json.loads(Path(path).read_text())["dice"]
    print(write_curves(args.runs, args.output_dir, references).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
