"""
Label-free measures of a pre-trained representation that SSL libraries track: the effective rank of the embeddings
(RankMe, Garrido et al., ICML 2023), and the alignment and uniformity of the normalised embeddings (Wang & Isola,
ICML 2020), on the two views of the pre-training's own batches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["alignment", "embedding_rank", "representation_measures", "uniformity"]


def embedding_rank(z: torch.Tensor, eps: float = 1e-7) -> float:
    """
    RankMe: :math:`\\exp(-\\sum_k p_k \\log p_k)` with :math:`p_k = \\sigma_k / \\|\\sigma\\|_1 + \\epsilon` the
    normalised singular values of the (N, D) embedding matrix; between 1 (collapse to one direction) and
    ``min(N, D)``.
    """
    sigma = torch.linalg.svdvals(z.detach().double())
    p = sigma / sigma.sum() + eps
    return float(torch.exp(-(p * p.log()).sum()))


def alignment(z1: torch.Tensor, z2: torch.Tensor, alpha: float = 2.0) -> float:
    """:math:`E \\|f(x) - f(y)\\|^\\alpha` over the positive pairs (two views of one image), normalised embeddings:
    0 when the views coincide, 4 (alpha 2) when opposite."""
    return float((F.normalize(z1, dim=1) - F.normalize(z2, dim=1)).norm(dim=1).pow(alpha).mean())


def uniformity(z: torch.Tensor, t: float = 2.0) -> float:
    """:math:`\\log E_{i < j} \\exp(-t \\|f(x_i) - f(x_j)\\|^2)` of the normalised embeddings: 0 when every
    embedding is the same (collapse), lower when they spread over the sphere."""
    u = F.normalize(z, dim=1)
    return float(torch.pdist(u).pow(2).mul(-t).exp().mean().log())


@torch.no_grad()
def representation_measures(engine, max_batches: int = 8) -> dict[str, float]:
    """
    The three measures over up to ``max_batches`` batches of a :py:class:`gcl_monai.engines.GCLPretrainer`'s data
    loader, for the image-wise embeddings (``img``) and the globally pooled encoder output (``features``), the
    network in evaluation mode (restored after).

    Returns:
        ``{"rank/img", "rank/features", "alignment/img", "uniformity/img", "num_images", "dim/img", ...}``.
    """
    network, training = engine.network, engine.network.training
    network.eval()
    img, feats = [], []
    for i, batch in enumerate(engine.data_loader):
        if i >= max_batches:
            break
        views = engine.views(batch)
        out = network(views)
        half = views.shape[0] // 2
        img.append(out["img"].view(2, half, -1).cpu())
        feats.append(out["features"].flatten(2).mean(-1).view(2, half, -1).cpu())
    network.train(training)
    z_img, z_feat = torch.cat(img, 1), torch.cat(feats, 1)
    return {
        "num_images": int(z_img.shape[1]),
        "dim/img": int(z_img.shape[2]),
        "rank/img": embedding_rank(z_img[0]),
        "alignment/img": alignment(z_img[0], z_img[1]),
        "uniformity/img": uniformity(z_img[0]),
        "dim/features": int(z_feat.shape[2]),
        "rank/features": embedding_rank(z_feat[0]),
        "alignment/features": alignment(z_feat[0], z_feat[1]),
        "uniformity/features": uniformity(z_feat[0]),
    }
