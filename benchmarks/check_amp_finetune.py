"""
Mixed precision in fine-tuning (``--amp True``: bfloat16 autocast of the forward pass, ``AutocastInferer``) against
float32, on the demo's phantom: the demo's fine-tuning from random initialisation (L = 1, 200 iterations; no
pre-training, which AMP does not touch) and evaluation with ``amp`` False and True for each fine-tuning seed.
Prints and writes, per seed, the test Dice and the seconds per fine-tuning iteration of both, and the paired
differences: the AMP Dice is acceptable when the mean paired difference lies within the spread of float32's Dice
over the seeds. Times are comparable only on an otherwise idle machine.

Usage (from the repository root)::

    python -m benchmarks.check_amp_finetune --seeds 0 1 2 --out docs/results/amp_finetune_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from monai.bundle import run

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "bundles" / "gcl_demo" / "configs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=4, help="fine-tuning epochs of 50 iterations")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="amp_"))
    common = {"bundle_root": str(root), "logging_file": str(CONFIGS / "logging.conf")}
    rows = []
    for seed in args.seeds:
        for amp in (False, True):
            name = f"seed{seed}_{'amp' if amp else 'fp32'}"
            cell = {"init": "random", "num_labeled": 1, "seed": seed, "run_name": name, **common}
            start = time.perf_counter()
            run(run_id="run", config_file=str(CONFIGS / "train.json"), epochs=args.epochs, amp=amp, **cell)
            seconds = time.perf_counter() - start
            run(run_id="run", config_file=[str(CONFIGS / "train.json"), str(CONFIGS / "evaluate.json")], **cell)
            dice = json.loads((root / "outputs" / "finetune" / name / "eval" / "dice.json").read_text())
            rows.append(
                {"seed": seed, "amp": amp, "dice": dice["dice"], "seconds_per_iteration": seconds / (50 * args.epochs)}
            )
            print(rows[-1], flush=True)
    fp32 = {r["seed"]: r for r in rows if not r["amp"]}
    amp = {r["seed"]: r for r in rows if r["amp"]}
    diffs = [amp[s]["dice"] - fp32[s]["dice"] for s in args.seeds]
    summary = {
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "fine_tuning_iterations": 50 * args.epochs,
        "rows": rows,
        "fp32_dice_mean": statistics.mean(r["dice"] for r in fp32.values()),
        "fp32_dice_sd_over_seeds": statistics.stdev(r["dice"] for r in fp32.values()) if len(fp32) > 1 else None,
        "amp_dice_mean": statistics.mean(r["dice"] for r in amp.values()),
        "amp_minus_fp32_mean": statistics.mean(diffs),
        "amp_minus_fp32_per_seed": diffs,
        "time_ratio_amp_over_fp32": statistics.median(
            amp[s]["seconds_per_iteration"] / fp32[s]["seconds_per_iteration"] for s in args.seeds
        ),
    }
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
