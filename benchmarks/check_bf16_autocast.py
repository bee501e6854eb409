"""
Does bfloat16 autocast change what GCL's pre-training decides? Checked on the CPU against float32, before any switch
(``torch.autocast(device_type, dtype=torch.bfloat16)`` around the iteration) is offered:

1. **paired iterations**: from the same weights, optimizer, GradMitigator and GradFilter state and the same random
   pixel pools, one full-GCL iteration in float32 and one under bfloat16 autocast on the same batch: the fraction
   of GradFilter's keep decisions (the ``num_keep`` smallest magnitudes of each anchor's positives) that agree, the
   share of float32's kept positives that bfloat16 drops, and the relative difference ``||c_bf16 - c_fp32|| /
   ||c_fp32||`` of GradMitigator's combined gradient; beside it, as a control, the same figures for float32 on the
   images rounded to bfloat16 (how much of the difference the inputs' rounding alone explains). The next pair starts
   from the float32 iteration's state;
2. **loss curves**: two runs of ``--iterations`` iterations from the same start, one in each precision, on the
   same sequence of batches: the largest relative difference of the total loss and of each image-wise loss.

Usage (from the repository root)::

    OMP_NUM_THREADS=1 python -m benchmarks.check_bf16_autocast --out docs/results/bf16_autocast_cpu.json
"""

from __future__ import annotations

import argparse
import copy
import json
from contextlib import ExitStack, nullcontext
from pathlib import Path

import torch

from benchmarks.bench_pretrain_iteration import build
from gcl_monai.gradients import GradMitigator
from gcl_monai.losses import GradFilter


def _batch(args, seed: int) -> dict:
    """A batch of two views with the three ACDC meta labels, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    n, size = args.batch_size, args.image_size
    return {
        "image": torch.rand(n, 1, size, size, generator=g),
        "image_2": torch.rand(n, 1, size, size, generator=g),
        "patient_id": torch.randint(0, max(1, n // 2), (n,), generator=g),
        "slice_quantile": torch.randint(1, 5, (n,), generator=g),
        "organ_state": torch.randint(0, 2, (n,), generator=g),
        "seed": seed,
    }


def _iteration(trainer, combiner, batch, bf16: bool) -> tuple[dict, list[torch.Tensor], list[torch.Tensor]]:
    """One iteration; returns its output, GradFilter's keep masks and GradMitigator's combined gradient."""
    masks: list[torch.Tensor] = []
    combined: list[torch.Tensor] = []
    keep_mask, combine = GradFilter.keep_mask, type(combiner).combine

    def record_mask(self, magnitudes):
        mask = keep_mask(self, magnitudes)
        masks.append(mask.detach().clone())
        return mask

    def record_combined(self, grads):
        out = combine(self, grads)
        combined.extend(g.detach().float().clone() for g in out)
        return out

    torch.manual_seed(int(batch["seed"]))  # the same random pixel pools in both precisions
    with ExitStack() as stack:
        stack.enter_context(_patched(GradFilter, "keep_mask", record_mask))
        stack.enter_context(_patched(type(combiner), "combine", record_combined))
        stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext())
        output = trainer._iteration(trainer, batch)
    return output, masks, combined


class _patched:
    def __init__(self, owner, name, value):
        self.owner, self.name, self.value = owner, name, value

    def __enter__(self):
        self.original = getattr(self.owner, self.name)
        setattr(self.owner, self.name, self.value)

    def __exit__(self, *exc):
        setattr(self.owner, self.name, self.original)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--features", type=int, nargs=6, default=[16, 32, 64, 128, 256, 16])
    p.add_argument("--pairs", type=int, default=5, help="paired iterations from the same state")
    p.add_argument("--iterations", type=int, default=20, help="iterations of each loss curve")
    p.add_argument("--out", type=Path, default=Path("results/bf16_autocast_cpu.json"))
    args = p.parse_args(argv)
    spec = argparse.Namespace(
        features=args.features,
        norm="batch",
        max_positive_images=4,
        grad_filter_block_elements=None,
        image_size=args.image_size,
        batch_size=args.batch_size,
    )
    fp32, fp32_combiner = build("gcl", spec, "cpu")
    assert isinstance(fp32_combiner, GradMitigator)

    pairs = []
    for i in range(args.pairs):
        batch = _batch(args, seed=i)
        # the control: float32 on the images rounded to bfloat16 (what the precision does to the inputs alone)
        rounded = {**batch, **{k: batch[k].to(torch.bfloat16).float() for k in ("image", "image_2")}}
        start = (
            copy.deepcopy(fp32.network.state_dict()),
            copy.deepcopy(fp32.optimizer.state_dict()),
            copy.deepcopy(fp32_combiner.state_dict()),
            fp32.grad_filter.state_dict(),
        )
        results = {}
        for name, inputs, half in (("control", rounded, False), ("bf16", batch, True), ("fp32", batch, False)):
            fp32.network.load_state_dict(start[0])
            fp32.optimizer.load_state_dict(copy.deepcopy(start[1]))
            fp32_combiner.load_state_dict(copy.deepcopy(start[2]))
            fp32.grad_filter.load_state_dict(start[3])
            results[name] = _iteration(fp32, fp32_combiner, inputs, bf16=half)[1:]
        masks_32, combined_32 = results["fp32"]  # the float32 run goes on from its own step
        row = {"positives": sum(a.numel() for a in masks_32)}
        for name in ("bf16", "control"):
            masks, combined = results[name]
            kept = sum(int(a.sum()) for a in masks_32)
            row[name] = {
                "decisions_agree": sum(int((a == b).sum()) for a, b in zip(masks_32, masks)) / row["positives"],
                "kept_fp32_not_here": sum(int((a & ~b).sum()) for a, b in zip(masks_32, masks)) / max(kept, 1),
                "combined_rel_diff": float(
                    torch.sqrt(sum(((a - b) ** 2).sum() for a, b in zip(combined_32, combined)))
                    / torch.sqrt(sum((a**2).sum() for a in combined_32))
                ),
            }
        pairs.append(row)
        print(
            f"pair {i}: "
            + "; ".join(
                f"{name}: decisions agree {r['decisions_agree']:.4f}, kept in fp32 only {r['kept_fp32_not_here']:.4f}, "
                f"combined gradient rel. diff {r['combined_rel_diff']:.2e}"
                for name, r in row.items()
                if name != "positives"
            )
        )

    curves = {"fp32": [], "bf16": []}
    for name, precise in (("fp32", True), ("bf16", False)):
        trainer, combiner = build("gcl", spec, "cpu")  # the same start (seeded) for both
        for i in range(args.iterations):
            output, _, _ = _iteration(trainer, combiner, _batch(args, seed=1000 + i), bf16=not precise)
            curves[name].append({k: float(v) for k, v in output.items() if k == "loss" or k.startswith("img/")})
    rel = {
        key: max(abs(a[key] - b[key]) / abs(a[key]) for a, b in zip(curves["fp32"], curves["bf16"]))
        for key in curves["fp32"][0]
    }
    for key, value in rel.items():
        print(f"loss curve {key}: largest relative difference over {args.iterations} iterations {value:.2e}")
    out = {
        "config": vars(args) | {"out": str(args.out)},
        "pairs": pairs,
        "curves": curves,
        "curve_max_rel_diff": rel,
        "torch": torch.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
