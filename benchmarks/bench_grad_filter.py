"""
Micro-benchmarks of the pixel-wise branch.

1. GradFilter's closed-form gradient magnitudes against one ``torch.autograd.grad`` call per positive (the
   definition): time ratio and agreement (exact with batch norm in evaluation mode; with instance/batch norm in
   training mode the normalisation statistics are held constant, see ``LastLayerJacobian``).
2. ``PixelContrastiveLoss`` forward + backward time and memory against the image size (the bytes the autograd
   graph saves, counted with ``torch.autograd.graph.saved_tensors_hooks``; on CUDA also ``max_memory_allocated``).

Usage (from the repository root)::

    python -m benchmarks.bench_grad_filter --out results/bench_grad_filter.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gcl_monai.losses import GradFilter, LastLayerJacobian, PixelContrastiveLoss
from gcl_monai.networks import GCLNet


def closed_form_vs_autograd(args, device: str | None = None, repeats: int = 5) -> dict:
    """
    GradFilter's closed-form magnitudes of the K positives of every anchor pixel of one (anchor, positive) image
    pair, against one ``torch.autograd.grad`` call per positive, in float64 on ``device`` (default
    ``args.device``). The closed form (Jacobian set-up included) is timed warm: median of ``repeats`` calls after
    one warm-up call, synchronised on CUDA; the autograd reference runs once over all positives.
    """
    device = torch.device(device or args.device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    torch.manual_seed(0)
    net = GCLNet(features=(8, 8, 16, 16, 32, 8), proj_dim=16, norm="batch").double().eval().to(device)
    x = torch.randn(4, 1, args.small_size, args.small_size, dtype=torch.double).to(device)
    out = net(x)
    u = F.normalize(out["pix"].flatten(2), dim=1).transpose(1, 2)
    z = F.normalize(out["img_map"].detach().flatten(2), dim=1).transpose(1, 2)
    hw = u.shape[1]
    k = math.ceil(0.3 * hw)
    a, b = torch.tensor([0], device=device), torch.tensor([2], device=device)
    loss = PixelContrastiveLoss(topk_ratio=0.3)

    def closed_form():
        jac = LastLayerJacobian.from_output(net, out)
        with torch.no_grad():
            logits = u[a].detach() @ u[b].detach().transpose(1, 2) / 0.1
            pool = (z[a] @ z[b].transpose(1, 2)).topk(k, dim=-1).indices
            is_pos = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, pool, True)
            magnitudes = loss._magnitudes(
                u.detach(), a, b, pool, logits.masked_fill(is_pos, float("-inf")), logits.gather(-1, pool), jac
            )[0]
        return magnitudes, pool

    closed_form()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        closed, pool = closed_form()
        sync()
        times.append(time.perf_counter() - start)
    t_closed = sorted(times)[len(times) // 2]

    params = [net.last_layer.conv.weight, net.last_layer.conv.bias]
    sync()
    start = time.perf_counter()
    reference = torch.empty(hw, k, dtype=torch.double, device=device)
    for p in range(hw):
        row = u[b[0]].detach() @ u[a[0], p] / 0.1
        neg = torch.ones(hw, dtype=torch.bool, device=device)
        neg[pool[0, p]] = False
        neg_lse = torch.logsumexp(row[neg], 0)
        for slot in range(k):
            q = pool[0, p, slot]
            term = torch.logaddexp(row[q], neg_lse) - row[q]
            grads = torch.autograd.grad(term, params, retain_graph=True)
            reference[p, slot] = torch.sqrt(sum((g**2).sum() for g in grads))
    sync()
    t_autograd = time.perf_counter() - start
    rel = ((closed - reference).abs() / reference).max().item()
    return {
        "device": str(device),
        "pixels": hw,
        "pool": k,
        "positives": hw * k,
        "closed_form_s": t_closed,
        "autograd_s": t_autograd,
        "speedup": t_autograd / t_closed,
        "max_relative_difference": rel,
    }


def pixel_loss_scaling(args) -> list[dict]:
    rows = []
    labels = torch.randint(0, 4, (args.batch_size,))
    for size in args.sizes:
        torch.manual_seed(0)
        net = GCLNet(features=(16, 32, 64, 128, 256, 16)).to(args.device)
        out = net(torch.randn(2 * args.batch_size, 1, size, size, device=args.device))
        pix = out["pix"].detach().requires_grad_(True)
        saved = [0]

        def pack(t, saved=saved):
            saved[0] += t.numel() * t.element_size()
            return t

        jac = LastLayerJacobian.from_output(net, out)
        for name, gf in (("no_filter", None), ("grad_filter", GradFilter(0.5))):
            loss_fn = PixelContrastiveLoss(max_positive_images=args.max_positive_images)
            saved[0] = 0
            if args.device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = loss_fn(pix, out["img_map"].detach(), labels.to(args.device), gf, jac)
            loss.backward()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            row = {
                "size": size,
                "pixels": pix.shape[-1] * pix.shape[-2],
                "variant": name,
                "seconds": time.perf_counter() - start,
                "autograd_saved_mb": saved[0] / 2**20,
            }
            if args.device.startswith("cuda"):
                row["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="GradFilter and pixel-loss micro-benchmarks")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--small-size", type=int, default=128, help="image size of the autograd comparison")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 192, 256])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-positive-images", type=int, default=4)
    parser.add_argument("--out", default="results/bench_grad_filter.json")
    args = parser.parse_args(argv)
    cmp = closed_form_vs_autograd(args)
    print(
        f"GradFilter, one anchor/positive image pair of {cmp['pixels']} pixels, pools of {cmp['pool']}: "
        f"closed form {cmp['closed_form_s'] * 1e3:.1f} ms vs one autograd call per positive "
        f"{cmp['autograd_s'] * 1e3:.0f} ms ({cmp['speedup']:.0f}x); max relative difference "
        f"{cmp['max_relative_difference']:.1e}"
    )
    rows = pixel_loss_scaling(args)
    print(f"{'size':>6s} {'pixels':>7s} {'variant':>12s} {'fwd+bwd s':>10s} {'graph MB':>9s}")
    for r in rows:
        print(f"{r['size']:6d} {r['pixels']:7d} {r['variant']:>12s} {r['seconds']:10.3f} {r['autograd_saved_mb']:9.1f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"closed_form_vs_autograd": cmp, "pixel_loss": rows}, indent=1))


if __name__ == "__main__":
    main()
