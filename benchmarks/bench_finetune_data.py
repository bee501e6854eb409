"""
The data part of a fine-tuning iteration (batch 5 of the ACDC ``train.json``): the loader path (``SliceDataset`` +
``DataLoader``, the augmentation per slice in the loading process) against the device path (``data_on_device``:
the slices cached as tensors on the device, :py:class:`gcl_monai.data.DeviceSliceBatches`, the same MONAI
transforms run there) slice by slice, and the device path with ``batched_augmentation`` (the same transforms as one
batch: :py:class:`gcl_monai.transforms.BatchSliceAugmentation`), all here on the CPU, one thread.

Per batch, for each path: the median seconds; the ATen operations it dispatches (on a GPU each is a kernel launch at
least); the host reads of a tensor's value (``aten._local_scalar_dense``: each a synchronisation on a GPU; MONAI's
``AdjustContrast`` reads the image's range, with the probability of the contrast change, 0.3 per slice). The device
path is also timed at a tiny image size (``--small``), where the arithmetic is negligible: that time is the host's
share of a batch (Python, MONAI's bookkeeping, dispatch), which on a GPU stays on the CPU while the arithmetic goes
to the device. docs/gpu_run.md predicts the H100 iteration from these figures; docs/results/speed.md compares the
batched augmentation with the per-slice one (the ratios printed at the end).

Usage (from the repository root; real ACDC under ``--data-root`` when present, else a synthetic dataset)::

    OMP_NUM_THREADS=1 python -m benchmarks.bench_finetune_data --data-root ../shared/data \\
        --out docs/results/finetune_data_cpu.json
    OMP_NUM_THREADS=1 python -m benchmarks.bench_finetune_data --paths device device_batched \\
        --out docs/results/finetune_batched_augmentation_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from monai.bundle import ConfigParser
from torch.utils._python_dispatch import TorchDispatchMode

from experiments.bundles import default_bundle_dir
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


def batches(paths: dict[str, tuple[ConfigParser, str]], count: int) -> dict[str, dict]:
    """
    Per path (``name: (parser, key of its batches)``): the median seconds per batch of ``count`` batches, wall-clock
    and of this thread's CPU time, the paths' batches interleaved (so that a change of the machine's load hits them
    alike; on a machine shared with other work the CPU time is what compares: it leaves out the time this process
    waits for a core); then the mean ATen operations and host reads per batch of ``count`` more.
    """
    iterators = {name: iter(parser.get_parsed_content(key)) for name, (parser, key) in paths.items()}
    for iterator in iterators.values():
        next(iterator)  # builds the cache (reads the volumes; the device path stacks the slices)
    wall: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(count):
        for name, iterator in iterators.items():
            start, start_cpu = time.perf_counter(), time.thread_time()
            next(iterator)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.thread_time() - start_cpu)
    out = {}
    for name, iterator in iterators.items():
        counter = DispatchCounter()
        with counter:
            for _ in range(count):
                next(iterator)
        out[name] = {
            "batch_s": statistics.median(wall[name]),
            "batch_cpu_s": statistics.median(cpu[name]),
            "aten_ops": counter.ops / count,
            "host_reads": counter.reads / count,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", type=Path, default=None, help="folder holding acdc/ (default: a synthetic dataset)")
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--small", type=int, default=16, help="the tiny image size of the host-share measurement")
    p.add_argument("--out", type=Path, default=Path("results/finetune_data_cpu.json"))
    p.add_argument(
        "--paths",
        nargs="+",
        choices=("loader", "device", "device_batched"),
        default=["loader", "device", "device_batched"],
        help="what to time (the device paths also at --small)",
    )
    args = p.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        dataset_dir = str(args.data_root / "acdc") if args.data_root else ensure_phantom(Path(tmp) / "acdc")

        def train(size: int, on_device: bool, batched: bool = False) -> ConfigParser:
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
                    "batched_augmentation": batched,
                    **({} if args.data_root else {"num_pretrain": 8, "num_val": 2, "num_test": 4}),
                }
            )
            return parser

        builders = {
            "loader": lambda size: (train(size, False), "train#dataloader"),
            "device": lambda size: (train(size, True), "train#device_dataloader"),
            "device_batched": lambda size: (train(size, True, True), "train#device_dataloader"),
        }
        out = {"data": "ACDC" if args.data_root else "synthetic", "threads": torch.get_num_threads(), "batch_size": 5}
        out.update(batches({name: builders[name](128) for name in args.paths}, args.batches))
        small = {f"{name}_{args.small}px": builders[name](args.small) for name in args.paths if name != "loader"}
        out.update(batches(small, args.batches))
    for name in [key for key in out if isinstance(out[key], dict)]:
        print(
            f"{name:>22}: {out[name]['batch_s'] * 1e3:7.2f} ms ({out[name]['batch_cpu_s'] * 1e3:7.2f} ms CPU), "
            f"{out[name]['aten_ops']:6.0f} ATen ops, "
            f"{out[name]['host_reads']:4.1f} host reads per batch"
        )
    ratios = {}
    if "loader" in out and "device" in out:
        ratios["device / loader"] = out["device"]["batch_s"] / out["loader"]["batch_s"]
        ratios["host share of the device path / loader"] = (
            out[f"device_{args.small}px"]["batch_s"] / out["loader"]["batch_s"]
        )
    if "device" in out and "device_batched" in out:
        for suffix in ("", f"_{args.small}px"):
            per_slice, batched = out[f"device{suffix}"], out[f"device_batched{suffix}"]
            size = f", {args.small} px" if suffix else ", 128 px"
            ratios[f"per-slice / batched augmentation{size}"] = per_slice["batch_s"] / batched["batch_s"]
            ratios[f"per-slice / batched augmentation{size}, CPU time"] = (
                per_slice["batch_cpu_s"] / batched["batch_cpu_s"]
            )
        ratios["ATen ops, per-slice / batched"] = out["device"]["aten_ops"] / out["device_batched"]["aten_ops"]
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f}")
    out["ratios"] = ratios
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
