"""
Compare diagnosed runs side by side:

    python -m gcl_monai.diagnose.compare diagnose/simclr diagnose/gcl diagnose/gcl_paper [--reference diagnose/simclr]

Reads each folder's ``summary.json`` (written by ``python -m gcl_monai.diagnose``) and prints one markdown row per
run: the image-wise losses first -> last window against chance, the mean drop, ``std/img`` and ``cos/img`` at
the end, GradMitigator's mean relative change of the update, the verdict, and, with ``--reference``, the mean drop
and ``std/img`` as multiples of the reference run's.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["comparison_table"]


def _load(folder: str | Path) -> dict:
    path = Path(folder) / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run python -m gcl_monai.diagnose with --output_dir {folder} first.")
    return json.loads(path.read_text())


def comparison_table(folders: Sequence[str | Path], reference: str | Path | None = None) -> str:
    """
    The markdown comparison of the diagnosed runs in ``folders`` (see the module docstring).

    Raises:
        FileNotFoundError: when a folder has no ``summary.json`` (the folder is named).
    """
    ref = _load(reference) if reference is not None else None
    header = [
        "run",
        "iterations",
        "image-wise losses (chance)",
        "mean drop",
        "std/img",
        "cos/img",
        "GradMiti. change",
        "verdict",
    ]
    if ref is not None:
        header[4:4] = ["drop / ref."]
        header[6:6] = ["std / ref."]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for folder in folders:
        s = _load(folder)
        losses = "<br>".join(
            f"{name}: {v['img_first']:.3f} -> {v['img_last']:.3f}{' ✓' if v['below_chance'] else ''}"
            for name, v in s["labels"].items()
        )
        cells = [
            Path(folder).name,
            str(s["iterations"]),
            f"{losses}<br>({s['chance']:.3f})",
            f"{s['mean_drop']:.3f}",
            f"{s['std_img'][1]:.4f}",
            f"{s['cos_img'][1]:.3f}",
            "–" if s["change"] is None or math.isnan(s["change"]) else f"{s['change']:.3f}",
            s["verdict"],
        ]
        if ref is not None:
            cells[4:4] = [f"{s['mean_drop'] / ref['mean_drop']:.2f}x"]
            cells[6:6] = [f"{s['std_img'][1] / ref['std_img'][1]:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcl_monai.diagnose.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="output folders of python -m gcl_monai.diagnose")
    parser.add_argument("--reference", default=None, help="folder of the reference run (e.g. SimCLR)")
    args = parser.parse_args(argv)
    print(comparison_table(args.folders, args.reference), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
