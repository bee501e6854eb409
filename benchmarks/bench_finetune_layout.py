"""
The fine-tuning step of the bundle's network in three layouts and precisions, interleaved, on this machine's CPU:
``float32`` (the default: contiguous NCHW weights), ``channels_last`` (``train.json``'s ``--channels_last True``:
the convolution weights channels-last, so oneDNN runs its blocked NHWC kernels) and ``channels_last + bf16``
(with ``--amp True``'s bfloat16 autocast of the forward pass). Each round times ``--steps`` steps of each variant
(forward, the bundle's DiceCE loss, backward, Adam) after one warm-up step each; the ratio of a round is the median
step of ``float32`` over that of the variant, and the reported ratio is the median over rounds (two single-thread
jobs may share the cores: interleaving keeps the ratio fair to each).

Beside the speed, what the layout changes: the evaluation-mode output of the same weights in each layout against
float64, whose largest absolute difference says that ``channels_last`` reorders float32 sums and nothing more
(bfloat16 does change the precision: a precision switch, measured for its Dice by ``check_amp_finetune``).

Writes the summary to ``--out`` (JSON) and its rows beside it (``.csv``: one row per variant and round with the
speed-up over float32, and one per variant with its median seconds per step).

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python -m benchmarks.bench_finetune_layout --batch-size 20 --image-size 192 \\
        --out docs/results/finetune_layout_cpu.json
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.bench_gpu_run_parts import parser_for
from benchmarks.bench_pretrain_iteration import device_name

VARIANTS = {"float32": (False, False), "channels_last": (True, False), "channels_last+bf16": (True, True)}


def _parser(channels_last: bool, work: str):
    overrides = {"channels_last": channels_last, "init": "random", "device": "$torch.device('cpu')"}
    return parser_for("train", {**overrides, "bundle_root": work, "split_file": f"{work}/split.json"})


def step_function(channels_last: bool, amp: bool, batch_size: int, image_size: int, work: str):
    """One fine-tuning step of ``train.json``'s network, loss and optimiser, built with ``channels_last``; ``amp``
    autocasts the forward pass to bfloat16 (the loss in float32, as the bundle's ``AutocastInferer``)."""
    parser = _parser(channels_last, work)
    network = parser.get_parsed_content("network")
    optimizer = parser.get_parsed_content("optimizer")
    loss = parser.get_parsed_content("loss")
    generator = torch.Generator().manual_seed(0)
    image = torch.randn(batch_size, 1, image_size, image_size, generator=generator)
    label = torch.randint(0, 4, (batch_size, 1, image_size, image_size), generator=generator)

    def step() -> float:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            output = network(image)
        loss(output.float(), label).backward()
        optimizer.step()
        return time.perf_counter() - start

    return network, step


def layout_error(batch_size: int, image_size: int, work: str) -> dict:
    """The largest absolute difference from float64 of the evaluation-mode output of one set of weights, in the
    default layout and channels-last (float32), and the output's standard deviation for scale."""
    network = _parser(False, work).get_parsed_content("network").eval()
    image = torch.randn(batch_size, 1, image_size, image_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = network.double()(image.double())
        network.float()
        default = network(image)
        last = network.to(memory_format=torch.channels_last)(image)
    return {
        "output_sd": float(exact.std()),
        "default_vs_float64": float((default.double() - exact).abs().max()),
        "channels_last_vs_float64": float((last.double() - exact).abs().max()),
    }


def rows(result: dict) -> list[dict]:
    """The CSV rows of a result: each variant's speed-up in each round, then each variant's median seconds per step
    (round ``median``)."""
    out = [
        {"variant": name, "round": i, "speedup_over_float32": ratio, "seconds_per_step": ""}
        for name, s in result["speedup_over_float32"].items()
        for i, ratio in enumerate(s["per_round"])
    ]
    for name, seconds in result["seconds_per_step"].items():
        median = result["speedup_over_float32"].get(name, {"median": 1.0})["median"]
        out.append({"variant": name, "round": "median", "speedup_over_float32": median, "seconds_per_step": seconds})
    return out


def write_rows(result: dict, target: Path) -> Path:
    with target.open("w", newline="") as f:
        writer = csv.DictWriter(
            f, ["variant", "round", "speedup_over_float32", "seconds_per_step"], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows(result))
    return target


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--image-size", type=int, default=192)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--note", default="", help="what else ran on the machine")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        steps = {}
        for name, (channels_last, amp) in VARIANTS.items():
            _, steps[name] = step_function(channels_last, amp, args.batch_size, args.image_size, work)
            steps[name]()  # warm-up: oneDNN builds its kernels on the first call
        rounds = []
        for _ in range(args.rounds):
            rounds.append({name: statistics.median(step() for _ in range(args.steps)) for name, step in steps.items()})
        error = layout_error(4, args.image_size, work)
    speedup = {
        name: {
            "per_round": [round(r["float32"] / r[name], 3) for r in rounds],
            "median": round(statistics.median(r["float32"] / r[name] for r in rounds), 3),
        }
        for name in VARIANTS
        if name != "float32"
    }
    result = {
        "device": device_name("cpu"),
        "torch": torch.__version__,
        "note": args.note,
        "config": {k: v for k, v in vars(args).items() if k != "out"} | {"out": str(args.out)},
        "seconds_per_step": {name: round(statistics.median(r[name] for r in rounds), 3) for name in VARIANTS},
        "speedup_over_float32": speedup,
        "layout_error": error,
    }
    for name, s in speedup.items():
        print(f"{name}: {s['median']:.2f}x float32 (rounds {s['per_round']})")
    print(f"largest |output - float64|: default {error['default_vs_float64']:.2e}, "
          f"channels_last {error['channels_last_vs_float64']:.2e} (output SD {error['output_sd']:.3f})")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        write_rows(result, args.out.with_suffix(".csv"))
    return result


if __name__ == "__main__":
    main()
