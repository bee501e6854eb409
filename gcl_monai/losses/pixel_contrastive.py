"""Pixel-wise contrastive loss guided by one meta label, with affinity-defined positive pools (Eq. 5-6)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.nn.modules.loss import _Loss

from .grad_filter import GradFilter, LastLayerJacobian
from .meta_contrastive import positive_mask

__all__ = ["PixelContrastiveLoss"]

#: GradFilter's block of pairs on a CPU, in elements of its largest temporary: 4 MiB of float32, cache-sized.
CPU_BLOCK_ELEMENTS = 2**20


class PixelContrastiveLoss(_Loss):
    """
    Pixel-wise contrastive loss of GCL (Wu et al., ACM MM 2023, Eq. 5-6).

    For each anchor image i and each of its positive images j under one meta label (the images with the same
    label, including i's own other view; see :py:func:`positive_mask`), every anchor pixel :math:`u` of i gets
    a positive pool :math:`P_u`: the Top-K pixels of j by the affinity of Eq. (6), the cosine similarity of the
    per-pixel image-wise features (``img_map``, before pooling). The other pixels of j are its negatives
    :math:`N_u`. The loss of Eq. (5),

    .. math::
        -\\frac{1}{|P_u|}\\sum_{u^+ \\in P_u} \\log \\frac{\\exp(u\\cdot u^+/\\tau)}{\\exp(u\\cdot u^+/\\tau) +
        \\sum_{u^- \\in N_u} \\exp(u\\cdot u^-/\\tau)},

    is averaged over all anchor pixels of all (anchor image, positive image) pairs. The pixel embeddings are
    L2-normalised here. With a :py:class:`GradFilter` whose ``keep_fraction`` is below 1, only the positives
    with the smallest closed-form gradient magnitudes are kept in each pool (Sec. 3.3).

    Complexity, with B = 2N images of HW pixels each, D-dimensional embeddings and P (anchor, positive image)
    pairs: the logits cost O(P HW^2 D) time and the autograd graph keeps O(P HW^2) values; GradFilter adds
    O(P HW (HW (D + H) + K H C)) time for the hidden width H and encoder width C (the negatives' weighted means,
    then one product with W_1 per positive), computed in chunks of ``pair_chunk_size`` pairs without gradients.
    P grows with the square of the batch for coarse meta labels (e.g. 2 organ states give P ~ 2N^2);
    ``max_positive_images`` caps it at 2N x ``max_positive_images`` by sampling, for each anchor image, its other
    view and random other positive images.

    Args:
        temperature: :math:`\\tau` (0.1 in the paper).
        topk_ratio: K as a fraction of the positive image's pixels (0.3 in the paper), in (0, 1).
        max_positive_images: at most this many positive images per anchor image (None: all).
        pair_chunk_size: pairs processed at once (bounds the peak memory of each step).
        max_chunk_elements: with an active GradFilter, the chunk is also cut so that its largest temporary,
            (pairs, HW, K, C) values, holds at most this many elements (2**25 float32 values: 128 MiB). The
            chunking changes no value (only time and memory).
        grad_filter_block_elements: GradFilter's magnitudes are computed in blocks of pairs whose (pairs, HW,
            K, C) temporary holds at most this many elements (:py:meth:`LastLayerJacobian.pool_magnitudes`);
            None: 2**20 (4 MiB, cache-sized) on a CPU, where it makes the selection about twice as fast, and the
            whole chunk on other devices. Changes no value.
    """

    def __init__(
        self,
        temperature: float = 0.1,
        topk_ratio: float = 0.3,
        max_positive_images: int | None = None,
        pair_chunk_size: int = 64,
        max_chunk_elements: int = 2**25,
        grad_filter_block_elements: int | None = None,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        if not 0.0 < topk_ratio < 1.0:
            raise ValueError(f"topk_ratio must be in (0, 1) so that every pool has negatives, got {topk_ratio}.")
        if max_chunk_elements < 1:
            raise ValueError(f"max_chunk_elements must be at least 1, got {max_chunk_elements}.")
        if grad_filter_block_elements is not None and grad_filter_block_elements < 1:
            raise ValueError(f"grad_filter_block_elements must be at least 1, got {grad_filter_block_elements}.")
        if max_positive_images is not None and max_positive_images < 1:
            raise ValueError(f"max_positive_images must be at least 1, got {max_positive_images}.")
        self.temperature = temperature
        self.topk_ratio = topk_ratio
        self.max_positive_images = max_positive_images
        self.pair_chunk_size = pair_chunk_size
        self.max_chunk_elements = max_chunk_elements
        self.grad_filter_block_elements = grad_filter_block_elements

    def pairs(
        self,
        num_images: int,
        labels: torch.Tensor | None,
        device: torch.device,
        order: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """
        (P, 2) indices of (anchor image, positive image) rows, after optional sub-sampling.

        Args:
            num_images: N.
            labels: (N,) meta labels, or None.
            device: device of the result.
            order: (2N, 2N) random priorities of the candidate positives (smaller first); drawn here when None.
                Sharing one ``order`` between meta labels makes their sub-samples overlap where their positives
                do, so that :py:meth:`forward_multi` computes those pairs once.
        """
        positives = positive_mask(num_images, labels, device=device)
        if self.max_positive_images is not None:
            rows = torch.arange(2 * num_images, device=device)
            order = torch.rand(positives.shape, device=device) if order is None else order.clone()
            order = order.masked_fill(~positives, math.inf)
            order[rows, (rows + num_images) % (2 * num_images)] = -1.0  # the other view is always kept
            rank = order.argsort(dim=1).argsort(dim=1)
            positives &= rank < self.max_positive_images
        return positives.nonzero()

    def forward(
        self,
        pix: torch.Tensor,
        img_map: torch.Tensor,
        labels: torch.Tensor | None = None,
        grad_filter: GradFilter | None = None,
        jacobian: LastLayerJacobian | None = None,
    ) -> torch.Tensor:
        """
        Args:
            pix: (2N, D, *spatial) pixel-wise representations (rows as in :py:class:`MetaContrastiveLoss`).
            img_map: (2N, D', *spatial) per-pixel image-wise features, for the affinity of Eq. (6).
            labels: (N,) integer meta label of each image, or None (positives: the other view only).
            grad_filter: optional GradFilter; active when its ``keep_fraction`` keeps fewer than K positives.
            jacobian: closed-form map to the encoder's last layer, required by an active ``grad_filter``.

        Raises:
            ValueError: on inconsistent shapes, or an active ``grad_filter`` without ``jacobian``.
        """
        return self.forward_multi(pix, img_map, [labels], grad_filter, jacobian)[0]

    def forward_multi(
        self,
        pix: torch.Tensor,
        img_map: torch.Tensor,
        labels: Sequence[torch.Tensor | None],
        grad_filter: GradFilter | None = None,
        jacobian: LastLayerJacobian | None = None,
    ) -> list[torch.Tensor]:
        """
        The loss under each of several meta labels, computing every (anchor image, positive image) pair once.

        A pair's positive pools (Eq. 6), its loss per anchor pixel and its GradFilter selection depend only on the
        two images, not on the meta label that made them positives, so the pairs of all meta labels are merged
        and each meta label's loss is the mean over its own pairs. Values equal separate :py:meth:`forward` calls
        with the same sub-sampling.

        Args:
            pix, img_map, grad_filter, jacobian: as in :py:meth:`forward`.
            labels: one entry per meta label: (N,) integer labels, or None.

        Returns:
            one scalar loss per entry of ``labels``.
        """
        if pix.ndim < 3 or pix.shape[0] % 2 or pix.shape[0] != img_map.shape[0] or pix.shape[2:] != img_map.shape[2:]:
            raise ValueError(
                f"pix (2N, D, *spatial) and img_map (2N, D', *spatial) must agree, got {tuple(pix.shape)} "
                f"and {tuple(img_map.shape)}."
            )
        u = F.normalize(pix.flatten(2), dim=1).transpose(1, 2)  # (2N, HW, D)
        with torch.no_grad():
            z = F.normalize(img_map.detach().flatten(2), dim=1).transpose(1, 2)
        num_rows, num_pixels = u.shape[:2]
        k = max(1, min(num_pixels - 1, math.ceil(self.topk_ratio * num_pixels)))
        filtering = grad_filter is not None and grad_filter.num_keep(k) < k
        if filtering and jacobian is None:
            raise ValueError("an active grad_filter needs the LastLayerJacobian of the forward pass.")
        order = torch.rand(num_rows, num_rows, device=pix.device) if self.max_positive_images is not None else None
        pair_sets = [self.pairs(num_rows // 2, y, pix.device, order) for y in labels]
        keys, inverse = torch.unique(torch.cat([p[:, 0] * num_rows + p[:, 1] for p in pair_sets]), return_inverse=True)
        per_pair = self._per_pair_losses(
            u, z, torch.stack([keys // num_rows, keys % num_rows], 1), k, grad_filter if filtering else None, jacobian
        )
        return [per_pair[idx].mean() for idx in inverse.split([len(p) for p in pair_sets])]

    def _per_pair_losses(
        self,
        u: torch.Tensor,
        z: torch.Tensor,
        pairs: torch.Tensor,
        k: int,
        grad_filter: GradFilter | None,
        jacobian: LastLayerJacobian | None,
    ) -> torch.Tensor:
        """(P,) loss of each pair, Eq. (5) averaged over its anchor pixels, in memory-bounded chunks."""
        num_pixels = u.shape[1]
        chunk_size = self.pair_chunk_size
        if grad_filter is not None:
            per_pair = num_pixels * k * max(jacobian.w_in.shape)
            chunk_size = max(1, min(chunk_size, self.max_chunk_elements // per_pair))
        losses = []
        for chunk in pairs.split(chunk_size):
            a, b = chunk[:, 0], chunk[:, 1]
            logits = u[a] @ u[b].transpose(1, 2) / self.temperature  # (P, HW, HW)
            with torch.no_grad():
                pool = (z[a] @ z[b].transpose(1, 2)).topk(k, dim=-1).indices  # (P, HW, K), Eq. (6)
                is_pos = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, pool, True)
            neg_logits = logits.masked_fill(is_pos, float("-inf"))
            neg_lse = torch.logsumexp(neg_logits, dim=-1, keepdim=True)  # (P, HW, 1)
            pos_logits = logits.gather(-1, pool)  # (P, HW, K)
            per_positive = torch.logaddexp(pos_logits, neg_lse) - pos_logits
            kept = k
            if grad_filter is not None:
                with torch.no_grad():
                    keep = grad_filter.keep_mask(self._magnitudes(u, a, b, pool, neg_logits, pos_logits, jacobian))
                per_positive = per_positive * keep
                kept = grad_filter.num_keep(k)
            losses.append(per_positive.sum((1, 2)) / (kept * num_pixels))
        return torch.cat(losses)

    def _magnitudes(
        self,
        u: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        pool: torch.Tensor,
        neg_logits: torch.Tensor,
        pos_logits: torch.Tensor,
        jacobian: LastLayerJacobian,
    ) -> torch.Tensor:
        """
        Gradient magnitude of each positive's term w.r.t. the encoder's last layer. Eq. (8) for one positive
        reads :math:`\\partial\\ell/\\partial u = -\\frac{1}{\\tau}\\sigma(\\log\\sum_{N_u} e^{u\\cdot u^-/\\tau} -
        u\\cdot u^+/\\tau)\\,(u^+ - \\bar u^-)`, with :math:`\\bar u^-` the softmax-weighted mean of the negatives.
        """
        neg_weights = torch.softmax(neg_logits, dim=-1)  # (P, HW, HW)
        neg_cos = (u[a] * (neg_weights @ u[b])).sum(-1)
        weight = torch.sigmoid(torch.logsumexp(neg_logits, dim=-1, keepdim=True) - pos_logits) / self.temperature
        block = self.grad_filter_block_elements
        if block is None and u.device.type == "cpu":
            block = CPU_BLOCK_ELEMENTS
        return jacobian.pool_magnitudes(a, b, pool, neg_weights, pos_logits * self.temperature, neg_cos, weight, block)
