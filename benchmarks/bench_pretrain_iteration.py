"""
Speed benchmark of one GCL pre-training iteration, per ablation, side by side in one process.

For SimCLR, multi-meta-label sum, + GradMitigator, + pixel branch (with and without GradFilter) and full GCL, at the
same batch, image size and network, times ``GCLPretrainer._iteration`` (forward, one gradient per meta label,
combination, optimizer step) on a fixed batch and reports each as a ratio to SimCLR, with images/s. It also reports
the share of an iteration spent in GradMitigator's ``combine`` and in GradFilter's selection (closed-form
magnitudes, Jacobian set-up and Top-k), the peak memory (CUDA: ``max_memory_allocated``; CPU: peak RSS of a
separate process per variant), and the data pipeline's slices/s (``SliceDataset`` + two-view augmentation on the
synthetic phantom) against the trainer's consumption.

Targets (issue "Reproduce the paper's experiments"): full GCL with M = 3 meta labels at most 2.5x a SimCLR iteration;
combine and GradFilter each under 10% of an iteration.

Usage (from the repository root)::

    python -m benchmarks.bench_pretrain_iteration --out docs/results/speed.json
    python -m benchmarks.bench_pretrain_iteration --device cuda --batch-size 48 --image-size 224 --features 32 64 128 256 512 32
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from gcl_monai.engines import GCLPretrainer
from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.handlers import GradMitigatorHandler
from gcl_monai.losses import GradFilter, LastLayerJacobian, PixelContrastiveLoss
from gcl_monai.networks import GCLNet

META = ["patient_id", "slice_quantile", "organ_state"]
VARIANTS = {
    "simclr": {"meta_labels": [None], "pixel": False, "mitigate": False, "filter": False},
    "multi_meta_sum": {"meta_labels": META, "pixel": False, "mitigate": False, "filter": False},
    "multi_meta_mitigator": {"meta_labels": META, "pixel": False, "mitigate": True, "filter": False},
    "pixcl": {"meta_labels": [None], "pixel": True, "mitigate": False, "filter": False},
    "pixcl_gradfilter": {"meta_labels": [None], "pixel": True, "mitigate": False, "filter": True},
    "gcl": {"meta_labels": META, "pixel": True, "mitigate": True, "filter": True},
}


class Timers:
    """Accumulates the time spent in wrapped functions."""

    def __init__(self):
        self.total: dict[str, float] = {}

    @contextmanager
    def wrap(self, owner, name: str, tag: str):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.total[tag] = self.total.get(tag, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed)
        try:
            yield
        finally:
            setattr(owner, name, original)


def make_batch(args, device):
    g = torch.Generator().manual_seed(0)
    n = args.batch_size
    return {
        "image": torch.rand(n, 1, args.image_size, args.image_size, generator=g).to(device),
        "image_2": torch.rand(n, 1, args.image_size, args.image_size, generator=g).to(device),
        "patient_id": torch.randint(0, n // 2, (n,), generator=g),
        "slice_quantile": torch.randint(1, 5, (n,), generator=g),
        "organ_state": torch.randint(0, 2, (n,), generator=g),
    }


def build(variant: str, args, device):
    spec = VARIANTS[variant]
    torch.manual_seed(0)
    net = GCLNet(features=args.features, norm=args.norm).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    grad_filter = GradFilter(0.5) if spec["filter"] else None
    trainer = GCLPretrainer(
        device=device,
        max_epochs=1,
        train_data_loader=[None],
        network=net,
        optimizer=opt,
        meta_labels=spec["meta_labels"],
        pixel_loss=PixelContrastiveLoss(max_positive_images=args.max_positive_images) if spec["pixel"] else None,
        grad_filter=grad_filter,
    )
    m = len(spec["meta_labels"])
    combiner = GradMitigator(m) if spec["mitigate"] else MeanCombiner(m)
    GradMitigatorHandler(combiner).attach(trainer)
    trainer.state.device = torch.device(device)
    return trainer, combiner


def time_variant(variant: str, args, device) -> dict:
    trainer, combiner = build(variant, args, device)
    batch = make_batch(args, device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    timers = Timers()
    times = []
    with timers.wrap(combiner, "combine", "combine"), timers.wrap(
        LastLayerJacobian, "from_output", "grad_filter"
    ), timers.wrap(PixelContrastiveLoss, "_magnitudes", "grad_filter"), timers.wrap(
        GradFilter, "keep_mask", "grad_filter"
    ):
        for i in range(args.warmup + args.iterations):
            if i == args.warmup:
                timers.total.clear()
            sync()
            start = time.perf_counter()
            trainer._iteration(trainer, batch)
            sync()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
    med = statistics.median(times)
    result = {
        "median_s": med,
        "images_per_s": 2 * args.batch_size / med,
        "combine_share": timers.total.get("combine", 0.0) / sum(times),
        "grad_filter_share": timers.total.get("grad_filter", 0.0) / sum(times),
    }
    if device.startswith("cuda"):
        result["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return result


def peak_rss_mb(variant: str, args) -> float:
    """Peak resident memory of a separate process running only this variant (CPU)."""
    child = ["--batch-size", str(args.batch_size), "--image-size", str(args.image_size), "--norm", args.norm,
             "--max-positive-images", str(args.max_positive_images), "--features", *map(str, args.features)]
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_pretrain_iteration", *child, "--only", variant, "--iterations", "2"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def data_pipeline_rate(args) -> float:
    """Slices/s of SliceDataset + two-view augmentation (the pre-training data path) on the synthetic phantom."""
    from monai.data import DataLoader

    from gcl_monai.data import SliceDataset, ensure_phantom, load_datalist
    from gcl_monai.transforms import pretrain_transforms, volume_transforms

    with tempfile.TemporaryDirectory() as tmp:
        datalist = load_datalist(ensure_phantom(tmp, num_patients=6), dataset="acdc")
        size = (args.image_size, args.image_size)
        ds = SliceDataset(
            datalist, volume_transforms(size, with_label=False), pretrain_transforms(size)
        )
        loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
        next(iter(loader))
        start, count = time.perf_counter(), 0
        for batch in loader:
            count += len(batch["image"])
        return count / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--features", type=int, nargs=6, default=[16, 32, 64, 128, 256, 16])
    parser.add_argument("--norm", default="batch")
    parser.add_argument("--max-positive-images", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--only", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="results/bench_pretrain_iteration.json")
    args = parser.parse_args(argv)

    if args.only:  # child process: one variant, report its peak RSS
        time_variant(args.only, args, args.device)
        print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return

    results = {}
    for variant in VARIANTS:
        results[variant] = time_variant(variant, args, args.device)
        if not args.device.startswith("cuda"):
            results[variant]["peak_memory_mb"] = peak_rss_mb(variant, args)
    base = results["simclr"]["median_s"]
    print(f"device {args.device} ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads), "
          f"batch {args.batch_size} x 2 views, {args.image_size}^2, features {args.features}")
    print(f"{'variant':24s} {'s/iter':>8s} {'x SimCLR':>9s} {'img/s':>8s} {'combine':>8s} {'filter':>8s} {'peak MB':>8s}")
    for name, r in results.items():
        r["ratio_to_simclr"] = r["median_s"] / base
        print(f"{name:24s} {r['median_s']:8.3f} {r['ratio_to_simclr']:9.2f} {r['images_per_s']:8.1f} "
              f"{100 * r['combine_share']:7.1f}% {100 * r['grad_filter_share']:7.1f}% {r['peak_memory_mb']:8.0f}")
    rate = data_pipeline_rate(args)
    consumption = results["gcl"]["images_per_s"] / 2
    print(f"data pipeline: {rate:.1f} slices/s; full GCL consumes {consumption:.1f} slices/s "
          f"(pipeline / consumption = {rate / consumption:.1f})")
    gcl = results["gcl"]
    print(f"targets: GCL / SimCLR = {gcl['ratio_to_simclr']:.2f} (<= 2.5), combine {100 * gcl['combine_share']:.1f}% "
          f"(< 10%), GradFilter {100 * gcl['grad_filter_share']:.1f}% (< 10%)")
    payload = {"config": vars(args), "variants": results, "pipeline_slices_per_s": rate,
               "gcl_consumption_slices_per_s": consumption, "torch": torch.__version__}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
