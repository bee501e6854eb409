"""
Speed benchmark of GCL pre-training and of the bundles' data and fine-tuning paths, side by side in one process.

1. One pre-training iteration (``GCLPretrainer._iteration``: forward, one gradient per meta label, combination,
   optimizer step) on a fixed batch, for SimCLR and each GCL component added (multi-meta-label sum,
   + GradMitigator, + pixel branch with and without GradFilter, full GCL), as a ratio to SimCLR with images/s.
   With several meta labels both exact ways of computing the per-meta-label gradients are timed (one backward
   pass per meta label, or one batched pass: ``batched_backward``). ``gcl_views_on_device`` is full GCL with the
   bundles' ``views_on_device``: the two views drawn inside the iteration by ``BatchContrastiveViews`` (its share
   of the iteration is reported as ``views_share``).
2. The share of an iteration spent in GradMitigator's ``combine`` and in GradFilter's selection (closed-form
   magnitudes, Jacobian set-up and Top-k). On CUDA the shares come from a second pass whose timers synchronise
   the device (without that, a timer measures only the launch of asynchronous kernels, or, around a host
   synchronisation, all the work queued before it).
3. GradFilter's closed form against one autograd call per positive (``bench_grad_filter``), warm, on the device.
4. The data pipeline (``SliceDataset`` + two views, epoch-seeded as in the bundles) in slices/s, in the main
   process and with the bundles' loader settings for this device (workers, pinned memory, persistent workers),
   against full GCL's consumption (slices/s).
5. FLOPs of one iteration of every variant (matrix products and convolutions, forward and backward, counted by
   ``torch.utils.flop_counter.FlopCounterMode``) and the share of them in GradFilter's selection: a time share that
   a faster implementation of the same products cannot go below while the selection runs at the arithmetic rate
   of the rest of the iteration.
6. The demo bundle's fine-tuning iteration (``train.json`` at ``--features``: data loading, ``SupervisedTrainer``
   and its handlers) against a bare forward/backward/Adam step of the same network on a fixed batch.

Peak memory: CUDA ``max_memory_allocated``; CPU: peak RSS of a separate process per variant.

Targets (issue "Speed on a GPU"): GPU: full GCL <= 2.5x SimCLR, combine < 10 % and GradFilter < 10 % of an
iteration, closed form >= 100x autograd, loader >= 1.5x consumption; CPU: combine and GradFilter < 15 %.

Usage (from the repository root)::

    python -m benchmarks.bench_pretrain_iteration --out docs/results/speed_cpu.json
    python -m benchmarks.bench_pretrain_iteration --device cuda --batch-size 48 --features 32 64 128 256 512 32 \\
        --iterations 20 --warmup 5 --out docs/results/speed_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.bench_grad_filter import closed_form_vs_autograd
from gcl_monai.engines import GCLPretrainer
from gcl_monai.gradients import GradMitigator, MeanCombiner
from gcl_monai.handlers import EmbeddingSpread, GradientCombinerHandler
from gcl_monai.losses import GradFilter, LastLayerJacobian, PixelContrastiveLoss
from gcl_monai.networks import GCLNet
from gcl_monai.transforms import BatchContrastiveViews

META = ["patient_id", "slice_quantile", "organ_state"]
VARIANTS = {
    "simclr": {"meta_labels": [None], "pixel": False, "mitigate": False, "filter": False},
    "multi_meta_sum": {"meta_labels": META, "pixel": False, "mitigate": False, "filter": False},
    "multi_meta_mitigator": {"meta_labels": META, "pixel": False, "mitigate": True, "filter": False},
    "pixcl": {"meta_labels": [None], "pixel": True, "mitigate": False, "filter": False},
    "pixcl_gradfilter": {"meta_labels": [None], "pixel": True, "mitigate": False, "filter": True},
    "gcl": {"meta_labels": META, "pixel": True, "mitigate": True, "filter": True},
    # the bundles' views_on_device: the two views drawn in the iteration, on the device (BatchContrastiveViews)
    "gcl_views_on_device": {"meta_labels": META, "pixel": True, "mitigate": True, "filter": True, "device_views": True},
}


def synchronizer(device: str):
    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


@contextmanager
def accumulating(owner, name: str, read, totals: dict, tag: str):
    """For the block, every call of ``owner.name`` adds ``read()`` after it minus ``read()`` before it to
    ``totals[tag]`` (a clock, a FLOP counter)."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = read()
        try:
            return original(*args, **kwargs)
        finally:
            totals[tag] = totals.get(tag, 0) + read() - start

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        setattr(owner, name, original)


class Timers:
    """Accumulates the time spent in wrapped functions (synchronising the device around them when ``sync``)."""

    def __init__(self, sync=None):
        self.total: dict[str, float] = {}
        self.sync = sync or (lambda: None)

    def _now(self) -> float:
        self.sync()
        return time.perf_counter()

    def wrap(self, owner, name: str, tag: str):
        return accumulating(owner, name, self._now, self.total, tag)


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


def build(variant: str, args, device, batched_backward: bool = False):
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
        pixel_loss=PixelContrastiveLoss(
            max_positive_images=args.max_positive_images, grad_filter_block_elements=args.grad_filter_block_elements
        )
        if spec["pixel"]
        else None,
        grad_filter=grad_filter,
        batched_backward=batched_backward,
        device_views=BatchContrastiveViews(spatial_size=args.image_size, seed=0) if spec.get("device_views") else None,
    )
    m = len(spec["meta_labels"])
    combiner = GradMitigator(m) if spec["mitigate"] else MeanCombiner(m)
    GradientCombinerHandler(combiner).attach(trainer)
    EmbeddingSpread().attach(trainer)  # the collapse statistics every bundle run computes
    trainer.state.device = torch.device(device)
    return trainer, combiner


def run_iterations(trainer, batch, count: int, sync) -> list[float]:
    times = []
    for _ in range(count):
        sync()
        start = time.perf_counter()
        trainer._iteration(trainer, batch)
        sync()
        times.append(time.perf_counter() - start)
    return times


GRAD_FILTER_PARTS = (
    (LastLayerJacobian, "from_output"),
    (PixelContrastiveLoss, "_magnitudes"),
    (GradFilter, "keep_mask"),
)


def time_variants(args, device: str) -> tuple[dict, dict]:
    """
    Every variant, and the batched backward of those with several meta labels, timed round-robin (one iteration of
    each per round, after ``args.warmup`` warm-up iterations each), so that a change of the machine's load hits all
    of them alike; ``ratio_to_simclr`` is the median over the rounds of the per-round ratio. Returns the results
    and the errors of the variants that could not run (e.g. an operator without a batching rule).
    """
    sync = synchronizer(device)
    cuda = device.startswith("cuda")
    batch = make_batch(args, device)
    runs, errors = {}, {}
    for variant, spec in VARIANTS.items():
        for batched in (False, True) if len(spec["meta_labels"]) > 1 else (False,):
            key = variant + ("+batched_backward" if batched else "")
            runs[key] = build(variant, args, device, batched)
            try:
                run_iterations(runs[key][0], batch, args.warmup, sync)
            except RuntimeError as error:
                errors[key] = str(error).splitlines()[0]
                print(f"{key} failed: {errors[key]}")
                del runs[key]
    times = {key: [] for key in runs}
    peak = {key: 0.0 for key in runs}
    timers = {key: Timers(sync if cuda else None) for key in runs}

    def timed_pass(key, count):
        trainer, combiner = runs[key]
        with ExitStack() as stack:
            stack.enter_context(timers[key].wrap(combiner, "combine", "combine"))
            for owner, name in GRAD_FILTER_PARTS:
                stack.enter_context(timers[key].wrap(owner, name, "grad_filter"))
            stack.enter_context(timers[key].wrap(BatchContrastiveViews, "forward", "views"))
            return run_iterations(trainer, batch, count, sync)

    for _ in range(args.iterations):
        for key, (trainer, _) in runs.items():
            if cuda:  # plain timing; the shares come from a synchronised pass below
                torch.cuda.reset_peak_memory_stats()
                times[key] += run_iterations(trainer, batch, 1, sync)
                peak[key] = max(peak[key], torch.cuda.max_memory_allocated() / 2**20)
            else:  # on the CPU the timers cost nothing: one pass for times and shares
                times[key] += timed_pass(key, 1)
    shared = {key: timed_pass(key, args.iterations) for key in runs} if cuda else times
    results = {}
    for key in runs:
        med = statistics.median(times[key])
        results[key] = {
            "median_s": med,
            "min_s": min(times[key]),
            "images_per_s": 2 * args.batch_size / med,
            "combine_share": timers[key].total.get("combine", 0.0) / sum(shared[key]),
            "grad_filter_share": timers[key].total.get("grad_filter", 0.0) / sum(shared[key]),
            "views_share": timers[key].total.get("views", 0.0) / sum(shared[key]),
            "ratio_to_simclr": statistics.median(t / s for t, s in zip(times[key], times["simclr"])),
        }
        if cuda:
            results[key]["peak_memory_mb"] = peak[key]
    return results, errors


def count_flops(variant: str, args, device: str) -> dict:
    """
    FLOPs of one iteration of ``variant`` on the benchmark batch (after one uncounted warm-up iteration) and the
    part of them spent in GradFilter's selection (``GRAD_FILTER_PARTS``). Only matrix products and convolutions
    count (``FlopCounterMode``): elementwise work, gathers and Top-k are free here.
    """
    trainer, _ = build(variant, args, device)
    batch = make_batch(args, device)
    sync = synchronizer(device)
    run_iterations(trainer, batch, 1, sync)
    counter = FlopCounterMode(display=False)
    inside = {"grad_filter": 0}
    with ExitStack() as stack:
        for owner, name in GRAD_FILTER_PARTS:
            stack.enter_context(accumulating(owner, name, counter.get_total_flops, inside, "grad_filter"))
        with counter:
            run_iterations(trainer, batch, 1, sync)
    total = counter.get_total_flops()
    return {
        "flops": total,
        "grad_filter_flops": inside["grad_filter"],
        "grad_filter_flop_share": inside["grad_filter"] / total,
    }


def own_peak_rss_mb() -> float:
    """
    Peak resident memory of this process's own address space: Linux's ``VmHWM``. ``ru_maxrss`` is not used where
    ``VmHWM`` exists: Linux carries the parent's peak into a child over fork and exec, so every child of a grown
    benchmark process would report at least the parent's peak.
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_mb(variant: str, args) -> float:
    """Peak resident memory of a separate process running only this variant (CPU)."""
    child = [
        "--batch-size",
        str(args.batch_size),
        "--image-size",
        str(args.image_size),
        "--norm",
        args.norm,
        "--max-positive-images",
        str(args.max_positive_images),
        "--features",
        *map(str, args.features),
    ]
    if args.grad_filter_block_elements is not None:
        child += ["--grad-filter-block-elements", str(args.grad_filter_block_elements)]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_pretrain_iteration",
            *child,
            "--only",
            variant,
            "--iterations",
            "2",
            "--warmup",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def bundle_loader_settings(device: str) -> dict:
    """The pre-training loader settings of the demo bundle (``pretrain.json``) on ``device``."""
    from monai.bundle import ConfigParser

    parser = ConfigParser()
    parser.read_config(str(Path(__file__).resolve().parents[1] / "bundles" / "gcl_demo" / "configs" / "pretrain.json"))
    original = torch.cuda.is_available
    torch.cuda.is_available = lambda: device.startswith("cuda")
    try:
        return {
            "num_workers": parser.get_parsed_content("num_workers"),
            "pin_memory": parser.get_parsed_content("train#dataloader#pin_memory"),
            "persistent_workers": parser.get_parsed_content("train#dataloader#persistent_workers"),
        }
    finally:
        torch.cuda.is_available = original


def data_pipeline_rate(args, settings: dict, epochs: int = 3) -> float:
    """
    Slices/s of SliceDataset + two-view augmentation (epoch-seeded, as with the bundles' EpochSeedHandler) on the
    synthetic phantom with the given loader settings, after a first (warm-up) epoch, which starts the workers.
    """
    from monai.data import DataLoader

    from gcl_monai.bundle import ensure_phantom
    from gcl_monai.data import SliceDataset, load_datalist
    from gcl_monai.transforms import pretrain_transforms, volume_transforms

    with tempfile.TemporaryDirectory() as tmp:
        datalist = load_datalist(ensure_phantom(tmp, num_patients=args.loader_patients), dataset="acdc")
        size = (args.image_size, args.image_size)
        ds = SliceDataset(datalist, volume_transforms(size, with_label=False), pretrain_transforms(size))
        loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, drop_last=True, **settings)
        count, elapsed = 0, 0.0
        for epoch in range(epochs):
            ds.set_epoch_seed(epoch)
            start = time.perf_counter()
            seen = sum(len(batch["image"]) for batch in loader)
            if epoch > 0:
                count, elapsed = count + seen, elapsed + time.perf_counter() - start
        del loader
        return count / elapsed


def bare_step_times(
    network: torch.nn.Module, loss_fn, batch_size: int, channels: int, args, device: str
) -> list[float]:
    """Seconds of ``warmup + iterations`` bare forward/backward/Adam steps of ``network`` on a fixed random batch
    (the first ``warmup`` dropped)."""
    sync = synchronizer(device)
    image = torch.rand(batch_size, 1, args.image_size, args.image_size, device=device)
    label = torch.randint(0, channels, (batch_size, 1, args.image_size, args.image_size), device=device)
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-4)
    times = []
    for i in range(args.warmup + args.iterations):
        sync()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(network(image), label).backward()
        optimizer.step()
        sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return times


def finetune_iteration(args, device: str) -> dict:
    """
    The demo bundle's fine-tuning iteration (train.json) against a bare forward/backward/Adam step of a copy of the
    same network and batch size, in ``args.finetune_rounds`` interleaved rounds: each epoch of the bundle
    (``warmup + iterations`` iterations) is followed by as many bare steps, so that a change of the machine's load
    hits both alike; the ratio is the median of the per-round ratios of medians. The bundle's time per iteration
    is split into waiting for the batch (data loading and augmentation, ``GET_BATCH_STARTED`` to
    ``GET_BATCH_COMPLETED``) and the rest (transfer, forward, backward, optimizer, handlers).
    """
    import copy

    from ignite.engine import Events
    from monai.bundle import ConfigWorkflow

    sync = synchronizer(device)
    config = Path(__file__).resolve().parents[1] / "bundles" / "gcl_demo" / "configs" / "train.json"
    per_epoch = args.warmup + args.iterations
    with tempfile.TemporaryDirectory() as tmp:
        wf = ConfigWorkflow(
            config_file=str(config),
            workflow_type=None,
            bundle_root=tmp,
            work_dir=tmp,
            init="random",
            num_patients=4,
            num_pretrain=1,
            num_val=1,
            num_test=1,
            epochs=args.finetune_rounds,
            val_interval=args.finetune_rounds + 1,
            iterations_per_epoch=per_epoch,
            image_size=[args.image_size] * 2,
            batch_size=args.finetune_batch_size,
            ckpt_dir=str(Path(tmp) / "models"),
            features=list(args.features),  # the pre-training variants' width (the paper's on a GPU run)
            # gpu-run's fine-tuning: the slices on the device, augmented as one batch (unless
            # --finetune-per-slice-augmentation), no host read of a value per iteration
            **(
                {
                    "data_on_device": True,
                    "batched_augmentation": not args.finetune_per_slice_augmentation,
                    "decollate": False,
                    "log_interval": args.finetune_rounds * per_epoch + 1,
                }
                if args.finetune_on_device
                else {}
            ),
        )
        wf.initialize()
        trainer = wf.parser.get_parsed_content("train#trainer")
        network = wf.parser.get_parsed_content("network")
        loss_fn = wf.parser.get_parsed_content("loss")
        channels = int(wf.parser.get_parsed_content("num_classes"))
        bare_network = copy.deepcopy(network)
        stamps: dict[str, list[float]] = {"started": [], "got_batch": [], "completed": []}
        rounds: list[dict] = []

        def stamp(key):
            def record(_):
                sync()
                stamps[key].append(time.perf_counter())

            return record

        def close_round(engine):
            keep = slice(args.warmup, None)
            started, got, done = (stamps[k][keep] for k in ("started", "got_batch", "completed"))
            bundle = statistics.median(c - s for s, c in zip(started, done))
            loading = statistics.median(g - s for s, g in zip(started, got))
            bare = statistics.median(
                bare_step_times(bare_network, loss_fn, args.finetune_batch_size, channels, args, device)
            )
            rounds.append({"bundle_s": bundle, "loading_s": loading, "bare_s": bare, "ratio": bundle / bare})
            for values in stamps.values():
                values.clear()

        trainer.add_event_handler(Events.GET_BATCH_STARTED, stamp("started"))
        trainer.add_event_handler(Events.GET_BATCH_COMPLETED, stamp("got_batch"))
        trainer.add_event_handler(Events.ITERATION_COMPLETED, stamp("completed"))
        trainer.add_event_handler(Events.EPOCH_COMPLETED, close_round)
        wf.run()
        # no finalize: it copies the best validated model, and validation is off here
    return {
        "bundle_s": statistics.median(r["bundle_s"] for r in rounds),
        "loading_s": statistics.median(r["loading_s"] for r in rounds),
        "bare_s": statistics.median(r["bare_s"] for r in rounds),
        "ratio": statistics.median(r["ratio"] for r in rounds),
        "batch_size": args.finetune_batch_size,
        "on_device": args.finetune_on_device,
        "batched_augmentation": args.finetune_on_device and not args.finetune_per_slice_augmentation,
        "threads": torch.get_num_threads(),
        "rounds": rounds,
    }


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"{cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads"


def cpu_model() -> str:
    """The processor's model name and vector extensions (``/proc/cpuinfo``; the machine's architecture where it is
    not readable): the ratios of a CPU benchmark depend on them (oneDNN's kernels differ between AVX2, AVX-512 and
    AMX processors)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    vector = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    if not names:
        return platform.processor() or platform.machine()
    return f"{platform.machine()} {names[0]}" + (f" ({', '.join(vector)})" if vector else "")


#: what one run can measure (``--parts``).
PARTS = ("variants", "flops", "closed_form", "loader", "finetune")


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
    parser.add_argument("--loader-patients", type=int, default=6, help="phantom patients of the loader benchmark")
    parser.add_argument("--finetune-batch-size", type=int, default=5, help="fine-tuning batch (the paper's: 5)")
    parser.add_argument("--finetune-rounds", type=int, default=3, help="interleaved bundle / bare fine-tuning rounds")
    parser.add_argument(
        "--finetune-on-device",
        action="store_true",
        help="fine-tune with the bundle's data_on_device, batched_augmentation, decollate off and the loss logged once "
        "(gpu-run's)",
    )
    parser.add_argument(
        "--finetune-per-slice-augmentation",
        action="store_true",
        help="with --finetune-on-device: augment slice by slice (the dataset's MONAI transforms) instead of as a batch",
    )
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure (default: all)")
    parser.add_argument(
        "--grad-filter-block-elements",
        type=int,
        default=None,
        help="grad_filter_block_elements of the pixel loss (default: 2**20 on a CPU, else one block)",
    )
    parser.add_argument(
        "--matmul-precision",
        default="highest",
        choices=("highest", "high", "medium"),
        help="torch.set_float32_matmul_precision for the run (high: TF32 matrix products on CUDA)",
    )
    parser.add_argument("--note", default="", help="free text stored with the results (e.g. machine load)")
    parser.add_argument("--skip-peak-rss", action="store_true", help="CPU: do not measure peak RSS per variant")
    parser.add_argument("--only", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="results/bench_pretrain_iteration.json")
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    torch.set_float32_matmul_precision(args.matmul_precision)

    if args.only:  # child process: one variant, report its peak RSS
        trainer, _ = build(args.only, args, args.device)
        run_iterations(trainer, make_batch(args, args.device), args.warmup + args.iterations, lambda: None)
        print(json.dumps({"peak_rss_mb": own_peak_rss_mb()}))
        return

    print(
        f"device {args.device} ({device_name(args.device)}), batch {args.batch_size} x 2 views, "
        f"{args.image_size}^2, features {args.features}"
    )
    payload: dict = {"device": device_name(args.device), "note": args.note, "config": vars(args)}
    if "variants" in args.parts:
        results, errors = time_variants(args, args.device)
        if not cuda and not args.skip_peak_rss:
            for variant in VARIANTS:
                results[variant]["peak_memory_mb"] = peak_rss_mb(variant, args)
        print(
            f"{'variant':33s} {'s/iter':>7s} {'min s':>7s} {'x SimCLR':>9s} {'img/s':>7s} {'combine':>8s} "
            f"{'filter':>7s} {'views':>6s} {'peak MB':>8s}"
        )
        for name, r in results.items():
            peak = r.get("peak_memory_mb")
            print(
                f"{name:33s} {r['median_s']:7.3f} {r['min_s']:7.3f} {r['ratio_to_simclr']:9.2f} "
                f"{r['images_per_s']:7.1f} {100 * r['combine_share']:7.1f}% {100 * r['grad_filter_share']:6.1f}% "
                f"{100 * r['views_share']:5.1f}% {'-' if peak is None else f'{peak:.0f}':>8s}"
            )
        gcl = results["gcl"]
        print(
            f"targets: GCL / SimCLR = {gcl['ratio_to_simclr']:.2f} (GPU <= 2.5), combine "
            f"{100 * gcl['combine_share']:.1f}% and GradFilter {100 * gcl['grad_filter_share']:.1f}% (GPU < 10%, "
            "CPU < 15%)"
        )
        payload.update(variants=results, errors=errors, gcl_consumption_slices_per_s=gcl["images_per_s"] / 2)

    if "flops" in args.parts:
        flops = {variant: count_flops(variant, args, args.device) for variant in VARIANTS}
        print(f"{'variant':33s} {'GFLOP':>8s} {'x SimCLR':>9s} {'GradFilter':>11s}")
        for name, f in flops.items():
            f["ratio_to_simclr"] = f["flops"] / flops["simclr"]["flops"]
            share = 100 * f["grad_filter_flop_share"]
            print(f"{name:33s} {f['flops'] / 1e9:8.1f} {f['ratio_to_simclr']:9.2f} {share:10.1f}%")
        payload["flops"] = flops

    if "closed_form" in args.parts:
        closed = closed_form_vs_autograd(argparse.Namespace(small_size=128), device=args.device)
        print(
            f"GradFilter closed form vs autograd per positive ({closed['positives']} positives): "
            f"{closed['closed_form_s'] * 1e3:.1f} ms vs {closed['autograd_s'] * 1e3:.0f} ms = "
            f"{closed['speedup']:.0f}x (GPU >= 100x), "
            f"max relative difference {closed['max_relative_difference']:.1e}"
        )
        payload["closed_form_vs_autograd"] = closed

    if "loader" in args.parts:
        settings = bundle_loader_settings(args.device)
        loader = {"main_process": data_pipeline_rate(args, {"num_workers": 0})}
        if settings["num_workers"] > 0:
            loader["bundle"] = data_pipeline_rate(args, settings)
        consumption = payload.get("gcl_consumption_slices_per_s")
        for name, rate in loader.items():
            against = (
                ""
                if consumption is None
                else (
                    f"; full GCL consumes {consumption:.1f} slices/s "
                    f"(pipeline / consumption = {rate / consumption:.2f}, GPU >= 1.5)"
                )
            )
            print(f"data pipeline ({name}): {rate:.1f} slices/s{against}")
        payload.update(loader_settings=settings, pipeline_slices_per_s=loader)

    if "finetune" in args.parts:
        finetune = finetune_iteration(args, args.device)
        print(
            f"fine-tuning (demo bundle, batch {finetune['batch_size']}, {args.finetune_rounds} interleaved rounds): "
            f"{finetune['bundle_s']:.3f} s/iteration, of which waiting for the batch {finetune['loading_s']:.3f} s, "
            f"vs bare forward/backward {finetune['bare_s']:.3f} s ({finetune['ratio']:.2f}x, target <= 1.5)"
        )
        payload["finetune"] = finetune
    payload["torch"] = torch.__version__
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=1))


if __name__ == "__main__":
    main()
