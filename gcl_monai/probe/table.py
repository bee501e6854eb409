"""
The probe results of several encoders as one CSV, a row per ``probe.json`` (what docs/results commits beside a
table of probe Dice):

    python -m gcl_monai.probe.table OUT.csv PROBE_DIR_OR_JSON [PROBE_DIR_OR_JSON ...]

Each row: the run (the folder of its ``probe.json``), the encoder and its seed, the probe's mode, the mean Dice and
one column per class, the volumes scored, every fold's Dice (``;``-separated, cross-validation) and the seconds.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from pathlib import Path

__all__ = ["probe_row", "write_probe_table"]


def _probe_json(path: str | Path) -> Path:
    path = Path(path)
    file = path if path.suffix == ".json" else path / "probe.json"
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist: run `python -m gcl_monai.probe ... --output_dir {path}`.")
    return file


def probe_row(path: str | Path) -> dict[str, object]:
    """One row of the table from a probe's output folder or its ``probe.json``.

    Raises:
        FileNotFoundError: no ``probe.json`` there, naming the path.
    """
    file = _probe_json(path)
    result = json.loads(file.read_text())
    row: dict[str, object] = {
        "run": file.parent.name,
        "encoder": result["encoder"],
        "encoder_seed": "" if result.get("encoder_seed") is None else result["encoder_seed"],
        "mode": result["settings"]["mode"],
        "dice": result["dice"],
    }
    row.update(result["dice_per_class"])
    row["num_volumes"] = result["num_volumes"]
    row["fold_dice"] = ";".join(f"{fold['dice']:.4f}" for fold in result["folds"]) if len(result["folds"]) > 1 else ""
    row["seconds"] = result.get("seconds", "")
    return row


def write_probe_table(paths: Sequence[str | Path], out_csv: str | Path) -> Path:
    """The rows of :func:`probe_row` for ``paths``, in that order, as ``out_csv``; returns its path.

    Raises:
        ValueError: the probes score different classes (one table holds one label set).
    """
    rows = [probe_row(p) for p in paths]
    columns = list(rows[0]) if rows else []
    for path, row in zip(paths, rows):
        if list(row) != columns:
            raise ValueError(f"{path}: its classes differ from {paths[0]}'s ({list(row)} against {columns}).")
    out = Path(out_csv)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcl_monai.probe.table", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_csv", type=Path)
    parser.add_argument("probes", nargs="+", type=Path, help="probe output folders (or their probe.json)")
    args = parser.parse_args(argv)
    print(write_probe_table(args.probes, args.out_csv).read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
