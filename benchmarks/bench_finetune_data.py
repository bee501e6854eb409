"""
The data part of a fine-tuning iteration (batch 5 of the ACDC ``train.json``): the loader path (``SliceDataset`` +
``DataLoader``, the augmentation per slice in the loading process) against the device path (``data_on_device``:
the slices cached as tensors on the device, :py:class:`gcl_monai.data.DeviceSliceBatches`, the same MONAI
transforms run there), both here on the CPU, one thread.

Per batch, for each path: the median seconds; the ATen operations it dispatches (on a GPU each is a kernel launch at
least); the host reads of a tensor's value (``aten._local_scalar_dense``: each a synchronisation on a GPU; MONAI's
``AdjustContrast`` reads the image's range, with the probability of the contrast change, 0.3 per slice). The device
path is also timed at a tiny image size (``--small``), where the arithmetic is negligible: that time is the host's
share of a batch (Python, MONAI's bookkeeping, dispatch), which on a GPU stays on the CPU while the arithmetic goes
to the device. docs/gpu_run.md predicts the H100 iteration from these figures.

Usage (from the repository root; real ACDC under ``--data-root`` when present, else a synthetic dataset)::

    OMP_NUM_THREADS=1 python -m benchmarks.bench_finetune_data --data-root ../shared/data \\
        --out docs/results/finetune_data_cpu.json
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

from gcl_monai.benchmark.bundles import default_bundle_dir
from gcl_monai.bundle import ensure_phantom


class DispatchCounter(TorchDispatchMode):
    """
    Counts the ATen operations, and among them the reads of a value by the host, inside the ``with`` block. MONAI's
    spatial transforms read their spatial rank from a float64 scalar they create on the host, never on the device
    (``torch.tensor(3.0, dtype=torch.double)`` for a tensor without metadata): those reads synchronise nothing on a
    GPU and are not counted.
    """

    def __init__(self):
        super().__init__()
        self.ops = 0
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.reads += func is torch.ops.aten._local_scalar_dense.default and args[0].dtype != torch.float64
        return func(*args, **(kwargs or {}))


def batches(parser: ConfigParser, key: str, count: int) -> dict:
    """Median seconds, mean ATen operations and mean host reads per batch of ``count`` batches of ``key``."""
    iterator = iter(parser.get_parsed_content(key))
    next(iterator)  # builds the cache (reads the volumes; the device path stacks the slices)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        next(iterator)
        times.append(time.perf_counter() - start)
    counter = DispatchCounter()
    with counter:
        for _ in range(count):
            next(iterator)
    times.sort()
    return {"batch_s": times[len(times) // 2], "aten_ops": counter.ops / count, "host_reads": counter.reads / count}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", type=Path, default=None, help="folder holding acdc/ (default: a synthetic dataset)")
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--small", type=int, default=16, help="the tiny image size of the host-share measurement")
    p.add_argument("--out", type=Path, default=Path("results/finetune_data_cpu.json"))
    args = p.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = str(args.data_root / "acdc") if args.data_root else ensure_phantom(Path(tmp) / "acdc")

        def train(size: int, on_device: bool) -> ConfigParser:
            parser = ConfigParser()
            parser.read_config(str(default_bundle_dir() / "gcl_acdc" / "configs" / "train.json"))
            parser.update(
                {
                    "dataset_dir": dataset_dir,
                    "split_file": f"{tmp}/split.json",
                    "bundle_root": tmp,
                    "num_workers": 0,
                    "device": "$torch.device('cpu')",
                    "batch_size": 5,
                    "num_labeled": 1,
                    "labeled_pool": "train+pretrain",
                    "iterations_per_epoch": 10_000,
                    "image_size": [size, size],
                    "data_on_device": on_device,
                    **({} if args.data_root else {"num_pretrain": 8, "num_val": 2, "num_test": 4}),
                }
            )
            return parser

        out = {
            "data": "ACDC" if args.data_root else "synthetic",
            "threads": torch.get_num_threads(),
            "batch_size": 5,
            "loader": batches(train(128, False), "train#dataloader", args.batches),
            "device": batches(train(128, True), "train#device_dataloader", args.batches),
            f"device_{args.small}px": batches(train(args.small, True), "train#device_dataloader", args.batches),
        }
    loader, device, small = out["loader"], out["device"], out[f"device_{args.small}px"]
    for name in ("loader", "device", f"device_{args.small}px"):
        print(
            f"{name:>14}: {out[name]['batch_s'] * 1e3:7.2f} ms, {out[name]['aten_ops']:6.0f} ATen ops, "
            f"{out[name]['host_reads']:4.1f} host reads per batch"
        )
    print(f"device / loader, here: {device['batch_s'] / loader['batch_s']:.2f}")
    print(f"host share of the device path / loader: {small['batch_s'] / loader['batch_s']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
