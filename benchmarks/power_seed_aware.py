"""
Power and coverage of the seed-aware interval (``experiments.study.intervals.seed_aware_difference``) for a design
of S pre-training seeds x D labelled draws, by simulation of the model the interval assumes: a paired difference
``mu + a_s + b_d + e_sd`` with normal seed, draw and residual effects. Power is the share of simulated experiments
whose p-value is below ``--alpha`` (0.025: the first step of Holm's correction over two comparisons, so a lower bound
on the power within a family of two); coverage the share whose 95 % interval holds ``mu``.

    python -m benchmarks.power_seed_aware --seeds 2 3 --draws 6 --effect 0.08 --draw-sd 0.033 --residual-sd 0.033 \
        --seed-sd 0 0.02 0.04 --out docs/results/power_gpu_replication.csv
"""

from __future__ import annotations

import argparse
import csv
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from experiments.study.intervals import seed_aware_difference


def simulate(
    seeds: int,
    draws: int,
    effect: float,
    seed_sd: float,
    draw_sd: float,
    residual_sd: float,
    alpha: float = 0.025,
    experiments: int = 2000,
    rng_seed: int = 0,
) -> dict[str, float]:
    """Power (p < ``alpha``), coverage of the 95 % interval and the median interval width over ``experiments``."""
    rng = np.random.default_rng(rng_seed)
    rejected = covered = 0
    widths = []
    for _ in range(experiments):
        table = (
            effect
            + rng.normal(0.0, seed_sd, (seeds, 1))
            + rng.normal(0.0, draw_sd, (1, draws))
            + rng.normal(0.0, residual_sd, (seeds, draws))
        )
        d = seed_aware_difference(table)
        rejected += d.p < alpha
        covered += d.low <= effect <= d.high
        widths.append(d.high - d.low)
    return {
        "power": rejected / experiments,
        "coverage": covered / experiments,
        "median_width": float(np.median(widths)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="pre-training seeds S")
    parser.add_argument("--draws", type=int, nargs="+", required=True, help="labelled draws D")
    parser.add_argument("--effect", type=float, nargs="+", required=True, help="the true mean difference")
    parser.add_argument("--seed-sd", type=float, nargs="+", required=True, help="SD of the seed effect")
    parser.add_argument("--draw-sd", type=float, required=True, help="SD of the draw effect")
    parser.add_argument("--residual-sd", type=float, required=True, help="SD of the residual")
    parser.add_argument("--alpha", type=float, default=0.025)
    parser.add_argument("--experiments", type=int, default=2000)
    parser.add_argument("--out", type=Path, required=True, help="CSV, one row per design and scenario")
    args = parser.parse_args(argv)
    rows = []
    for s, d, effect, seed_sd in itertools.product(args.seeds, args.draws, args.effect, args.seed_sd):
        result = simulate(s, d, effect, seed_sd, args.draw_sd, args.residual_sd, args.alpha, args.experiments)
        rows.append(
            {
                "seeds": s,
                "draws": d,
                "effect": effect,
                "seed_sd": seed_sd,
                "draw_sd": args.draw_sd,
                "residual_sd": args.residual_sd,
                "alpha": args.alpha,
                "experiments": args.experiments,
                **{k: round(v, 4) for k, v in result.items()},
            }
        )
        print(rows[-1])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
