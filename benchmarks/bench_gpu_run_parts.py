"""
The CPU-side costs of each part of ``gpu-run``, measured on this machine, from which docs/gpu_run.md predicts the
time of each step on an H100 (with the H100 figures of ../shared/notes/gpu_paper_preset_acdc.md):

1. fine-tuning data: seconds per batch of the ACDC ``train.json`` loader (its augmentation, ``num_workers = 0``, one
   thread: the core-seconds a loader worker spends per batch), and the first batch (reading the volumes);
2. pre-training data: seconds per batch of the ACDC ``pretrain.json`` loader (two views per slice), likewise;
3. the fine-tuning step of the paper-width U-Net (``train.json``'s network, DiceCE loss, Adam) on a batch: its
   floating-point operations (``FlopCounterMode``; forward and backward), the number of ATen operations it dispatches
   (each one a kernel launch, at least, on a GPU: the host's share of an iteration in eager mode), and its time here;
4. the pre-training iteration's operations for SimCLR at the paper's batch, to scale from the H100's measured 0.022 s.

Usage (from the repository root; real ACDC under ``--data-root`` when present, else a synthetic dataset)::

    OMP_NUM_THREADS=1 python -m benchmarks.bench_gpu_run_parts --data-root ../shared/data \\
        --out docs/results/gpu_run_parts_cpu.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from monai.bundle import ConfigParser
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from experiments.bundles import default_bundle_dir
from gcl_monai.bundle import ensure_phantom

PAPER_FEATURES = [32, 64, 128, 256, 512, 32]


class OpCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched inside the ``with`` block."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def parser_for(config: str, overrides: dict) -> ConfigParser:
    parser = ConfigParser()
    parser.read_config(str(default_bundle_dir() / "gcl_acdc" / "configs" / f"{config}.json"))
    parser.update(overrides)
    return parser


def loader_seconds(parser: ConfigParser, batches: int) -> dict:
    """The first batch (reading and preparing the volumes) and the median of the next ``batches`` batches."""
    start = time.perf_counter()
    loader = parser.get_parsed_content("train#dataloader")
    iterator = iter(loader)
    next(iterator)
    first = time.perf_counter() - start
    times = []
    while len(times) < batches:
        start = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            iterator = iter(loader)
            continue
        times.append(time.perf_counter() - start)
    times.sort()
    return {"first_batch_s": first, "batch_s": times[len(times) // 2], "batches": batches}


def finetune_step(parser: ConfigParser, batch_size: int, image_size: int, repeats: int) -> dict:
    """FLOPs, dispatched operations and time of one fine-tuning step of the bundle's network, loss and optimizer."""
    network = parser.get_parsed_content("network")
    optimizer = parser.get_parsed_content("optimizer")
    loss = parser.get_parsed_content("loss")
    image = torch.randn(batch_size, 1, image_size, image_size)
    label = torch.randint(0, 4, (batch_size, 1, image_size, image_size))

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss(network(image), label).backward()
        optimizer.step()

    step()
    with FlopCounterMode(display=False) as flops:
        step()
    with OpCounter() as ops:
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    return {
        "flops": flops.get_total_flops(),
        "aten_ops": ops.count,
        "cpu_s": times[len(times) // 2],
        "parameters": sum(p.numel() for p in network.parameters()),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", type=Path, default=None, help="folder holding acdc/ (default: a synthetic dataset)")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--pretrain-batches", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--views-on-device",
        action="store_true",
        help="pre-training with the bundles' views_on_device (the two views drawn in the iteration)",
    )
    p.add_argument("--out", type=Path, default=Path("results/gpu_run_parts_cpu.json"))
    args = p.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = str(args.data_root / "acdc") if args.data_root else ensure_phantom(Path(tmp) / "acdc")
        common = {
            "dataset_dir": dataset_dir,
            "split_file": f"{tmp}/split.json",
            "num_workers": 0,
            "features": PAPER_FEATURES,
            "device": "$torch.device('cpu')",
            "bundle_root": str(tmp),
        }
        if not args.data_root:
            common.update(num_pretrain=8, num_val=2, num_test=4)
        train = parser_for(
            "train",
            {
                **common,
                "batch_size": 5,
                "num_labeled": 1,
                "labeled_pool": "train+pretrain",
                "iterations_per_epoch": 10_000,
                "output_dir": tmp,
            },
        )
        pretrain = parser_for(
            "pretrain", {**common, "batch_size": 48, "pretrain_dir": tmp, "views_on_device": args.views_on_device}
        )
        out = {
            "data": "ACDC" if args.data_root else "synthetic",
            "threads": torch.get_num_threads(),
            "finetune_loader": {"batch_size": 5, **loader_seconds(train, args.batches)},
            "pretrain_loader": {
                "batch_size": 48,
                "views_on_device": args.views_on_device,
                **loader_seconds(pretrain, args.pretrain_batches),
            },
            "finetune_step": {"batch_size": 5, "image_size": 128, **finetune_step(train, 5, 128, args.repeats)},
        }
    for name, value in out.items():
        print(name, value)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
