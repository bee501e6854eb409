"""
Micro-benchmark of ``GradMitigator.combine``.

Times one ``combine`` call on the parameter list of a BasicUNet-like 2D encoder (5 levels of two
conv3x3 + instance norm blocks, 40 tensors) scaled to about 1M, 5M and 20M elements, for M tasks in {2, 3, 4}
and both granularities, against:

    - a naive implementation of Algorithm 1 looping in Python over the parameters (per-tensor torch ops,
      Python-float targets), which is what the vectorised implementation replaces;
    - ``MeanCombiner.combine`` (plain average, the lower bound of any combiner);
    - one forward + backward pass of the encoder itself on a small batch (the cost ``combine`` is added to,
      M times per step in GCL).

Each time is the minimum over ``--repeats`` calls, single-threaded by default (``--threads``) so that the numbers
stay stable on a shared CPU. Prints a table and writes JSON to ``--out`` (default
``results/bench_grad_mitigator.json``).

Usage::

    python -m benchmarks.bench_grad_mitigator        (from the repository root)
    python -m benchmarks.bench_grad_mitigator --sizes 1e6 5e6 --tasks 2 3 --repeats 5 --device cuda
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable

import torch
from torch import nn

from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.gradients.algorithm1 import algorithm1

# BasicUNet encoder features (conv_0, down_1, ..., down_4) at scale 1; ~1.19M parameters in 2D.
BASE_FEATURES = (32, 32, 64, 128, 256)


def make_encoder(target_numel: float) -> nn.Module:
    """A BasicUNet-like 2D encoder whose features are scaled so that it has about ``target_numel`` parameters."""

    def build(features):
        layers, c_in = [], 1
        for level, c_out in enumerate(features):
            if level > 0:
                layers.append(nn.MaxPool2d(2))
            for _ in range(2):
                layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.InstanceNorm2d(c_out, affine=True)]
                layers.append(nn.LeakyReLU(0.1))
                c_in = c_out
        return nn.Sequential(*layers)

    base = sum(p.numel() for p in build(BASE_FEATURES).parameters())
    scale = math.sqrt(target_numel / base)
    return build([max(1, round(f * scale)) for f in BASE_FEATURES])


class NaiveGradMitigator:
    """The baseline: Algorithm 1 as the paper writes it (:py:func:`gcl_monai.gradients.algorithm1.algorithm1`, a
    Python loop over parameters and task pairs), holding its targets between calls."""

    def __init__(self, num_tasks: int, beta: float = 0.01, granularity: str = "parameter", eps: float = 1e-12):
        self.num_tasks, self.beta, self.granularity, self.eps = num_tasks, beta, granularity, eps
        self.targets: torch.Tensor | None = None

    def combine(self, grads):
        if self.targets is None:
            segments = 1 if self.granularity == "global" else len(grads[0])
            self.targets = torch.zeros(self.num_tasks, self.num_tasks, segments, dtype=torch.float64)
        return algorithm1(grads, self.targets, self.beta, self.granularity, self.eps)


def time_ms(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Best (minimum) wall time of ``fn`` in milliseconds over ``repeats`` calls, after one warm-up call."""

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def bench_backward(net: nn.Module, batch: int, size: int, repeats: int, device: torch.device) -> float:
    x = torch.randn(batch, 1, size, size, device=device)

    def step():
        net.zero_grad(set_to_none=True)
        net(x).square().mean().backward()

    return time_ms(step, repeats, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 5e6, 20e6], help="target parameter counts")
    parser.add_argument("--tasks", type=int, nargs="+", default=[2, 3, 4], help="numbers of tasks M")
    parser.add_argument("--granularities", nargs="+", default=["parameter", "global"], choices=["parameter", "global"])
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per measurement (minimum reported)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch.set_num_threads (1: stable on a shared CPU; 0: torch's default)"
    )
    parser.add_argument("--batch", type=int, default=4, help="batch of the forward+backward reference")
    parser.add_argument("--image-size", type=int, default=96, help="image side of the forward+backward reference")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive per-parameter loop")
    parser.add_argument("--no-backward", action="store_true", help="skip the forward+backward reference")
    parser.add_argument("--out", default="results/bench_grad_mitigator.json")
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    gen = torch.Generator(device=device).manual_seed(0)
    rows = []
    header = (
        f"{'numel':>10} {'tensors':>7} {'M':>2} {'granularity':>11} {'mitigator ms':>12} {'naive ms':>9} "
        f"{'naive/vec':>9} {'sum ms':>7} {'fwd+bwd ms':>10} {'mitig/bwd':>9}"
    )
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        net = make_encoder(size).to(device)
        shapes = [p.shape for p in net.parameters()]
        numel = sum(p.numel() for p in net.parameters())
        backward_ms = None
        if not args.no_backward:
            backward_ms = bench_backward(net, args.batch, args.image_size, args.repeats, device)
        for num_tasks in args.tasks:
            grads = [[torch.randn(s, generator=gen, device=device) for s in shapes] for _ in range(num_tasks)]
            summer = MeanCombiner(num_tasks)
            sum_ms = time_ms(lambda summer=summer, grads=grads: summer.combine(grads), args.repeats, device)
            for granularity in args.granularities:
                mitigator = GradMitigator(num_tasks, granularity=granularity)
                vec_ms = time_ms(lambda m=mitigator, grads=grads: m.combine(grads), args.repeats, device)
                naive_ms = None
                if not args.no_naive:
                    naive = NaiveGradMitigator(num_tasks, granularity=granularity)
                    naive_ms = time_ms(lambda naive=naive, grads=grads: naive.combine(grads), args.repeats, device)
                row = {
                    "numel": numel,
                    "num_tensors": len(shapes),
                    "num_tasks": num_tasks,
                    "granularity": granularity,
                    "mitigator_ms": vec_ms,
                    "naive_ms": naive_ms,
                    "naive_over_mitigator": None if naive_ms is None else naive_ms / vec_ms,
                    "sum_ms": sum_ms,
                    "forward_backward_ms": backward_ms,
                    "mitigator_over_forward_backward": None if backward_ms is None else vec_ms / backward_ms,
                }
                rows.append(row)

                def fmt(v, spec):
                    return "-" if v is None else format(v, spec)

                print(
                    f"{numel:>10} {len(shapes):>7} {num_tasks:>2} {granularity:>11} {vec_ms:>12.1f} "
                    f"{fmt(naive_ms, '>9.1f')} {fmt(row['naive_over_mitigator'], '>9.2f')} {sum_ms:>7.1f} "
                    f"{fmt(backward_ms, '>10.1f')} {fmt(row['mitigator_over_forward_backward'], '>9.3f')}"
                )
            del grads
    out_dir = os.path.dirname(args.out)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    meta = {
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "repeats": args.repeats,
        "forward_backward_input": [args.batch, 1, args.image_size, args.image_size],
    }
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
