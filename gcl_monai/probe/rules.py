"""
docs/protocol.md's stage-A rules read off the probe histories of pre-trainings (their ``probe_history.jsonl``), for
the protocol's driver (benchmarks/protocol_stage_a.sh)::

    python -m gcl_monai.probe.rules length RUN [RUN ...]        # prints the chosen length; exit 1: no common epoch
    python -m gcl_monai.probe.rules above VARIANT --than RUN [RUN ...] --epoch N    # exit 0: above, 1: not,
                                                                # 2: a run has no probe at N
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gcl_monai.probe.curves import chosen_length, read_history

__all__ = ["above_mean"]


def above_mean(variant: Mapping[int, float], defaults: Sequence[Mapping[int, float]], epoch: int) -> bool:
    """
    Whether a variant's probe Dice at ``epoch`` is above the mean of the default's seeds there (docs/protocol.md,
    amendment 2: a variant's seed 1 runs only then).

    Raises:
        KeyError: naming the epoch, when a run has no probe evaluation at it.
    """
    for history in (variant, *defaults):
        if epoch not in history:
            raise KeyError(f"no probe evaluation at epoch {epoch} (evaluated: {sorted(history)})")
    return variant[epoch] > float(np.mean([h[epoch] for h in defaults]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcl_monai.probe.rules", description=__doc__.split("::")[0])
    commands = parser.add_subparsers(dest="rule", required=True)
    length = commands.add_parser("length", help="stage A, step 1: the length of one method's seeds")
    length.add_argument("runs", nargs="+", type=Path, help="the method's pre-training folders (one per seed)")
    above = commands.add_parser("above", help="amendment 2: a variant's seed 0 above the default's mean")
    above.add_argument("variant", type=Path, help="the variant's pre-training folder")
    above.add_argument("--than", nargs="+", type=Path, required=True, help="the default's pre-training folders")
    above.add_argument("--epoch", type=int, required=True)
    args = parser.parse_args(argv)
    if args.rule == "length":
        chosen = chosen_length([read_history(run) for run in args.runs])
        if chosen is None:
            print(f"no probe epoch common to {', '.join(map(str, args.runs))}", file=sys.stderr)
            return 1
        print(chosen)
        return 0
    try:
        above_it = above_mean(read_history(args.variant), [read_history(r) for r in args.than], args.epoch)
    except (KeyError, FileNotFoundError) as error:  # not a verdict: the driver stops
        print(f"{args.variant}: {error}", file=sys.stderr)
        return 2
    return 0 if above_it else 1


if __name__ == "__main__":
    raise SystemExit(main())
