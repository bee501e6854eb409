"""Image-wise contrastive loss guided by one meta label (Eq. 1); without a label it is SimCLR's NT-Xent."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.modules.loss import _Loss

__all__ = ["MetaContrastiveLoss", "chance_level", "positive_mask"]


def positive_mask(num_images: int, labels: torch.Tensor | None, device: torch.device | None = None) -> torch.Tensor:
    """
    Positives of each of the 2N rows of a two-view batch (rows i and i + N are the two views of image i).

    Row a's positives are its other view and every other row whose image has the same meta label; a row is
    never its own positive.

    Args:
        num_images: N, the number of images (half the number of rows).
        labels: (N,) integer meta labels, or None for "only the other view" (SimCLR).
        device: device of the returned mask.

    Returns:
        (2N, 2N) boolean tensor.

    Raises:
        ValueError: when ``labels`` is not a 1-D tensor of length N.
    """
    if labels is None:
        image_ids = torch.arange(num_images, device=device)
    else:
        if labels.ndim != 1 or labels.shape[0] != num_images:
            raise ValueError(f"labels must have shape ({num_images},), got {tuple(labels.shape)}.")
        image_ids = labels.to(device)
    rows = image_ids.repeat(2)
    mask = rows[:, None] == rows[None, :]
    return mask.fill_diagonal_(False)


class MetaContrastiveLoss(_Loss):
    """
    Contrastive loss in which images that share a meta label are positives (Wu et al., ACM MM 2023, Eq. 1):

    .. math::
        \\mathcal{L}^{m}_{img} = \\frac{1}{2N} \\sum_{i=1}^{2N} \\frac{-1}{|P^m_i|} \\sum_{j \\in P^m_i}
        \\log \\frac{\\exp(z_i \\cdot z_j / \\tau)}{\\sum_{a \\neq i} \\exp(z_i \\cdot z_a / \\tau)}

    ``z`` holds 2N rows: rows 0..N-1 are the first augmented view and rows N..2N-1 the second view of the
    same N images. :math:`P^m_i` is the other view of row i plus every other row whose image has the same
    meta label; the denominator runs over all 2N - 1 other rows. With ``labels=None`` the only positive is the
    other view, which is exactly SimCLR's NT-Xent loss (Chen et al., ICML 2020).

    Args:
        temperature: :math:`\\tau` (0.1 in the paper).

    Example::

        loss = MetaContrastiveLoss(temperature=0.1)
        z = torch.randn(8, 128)                       # 2 views of 4 images
        l_simclr = loss(z)
        l_quantile = loss(z, labels=torch.tensor([1, 1, 3, 4]))
    """

    def __init__(self, temperature: float = 0.1) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        self.temperature = temperature

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """
        Args:
            z: (2N, D) representations (L2-normalised here).
            labels: (N,) integer meta label of each image, or None.

        Raises:
            ValueError: when ``z`` is not 2-D with an even number (at least 2) of rows.
        """
        if z.ndim != 2 or z.shape[0] < 2 or z.shape[0] % 2:
            raise ValueError(f"z must have shape (2N, D) with N >= 1, got {tuple(z.shape)}.")
        z = F.normalize(z, dim=1)
        logits = z @ z.T / self.temperature
        not_self = ~torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
        log_prob = logits - torch.logsumexp(logits.masked_fill(~not_self, float("-inf")), dim=1, keepdim=True)
        positives = positive_mask(z.shape[0] // 2, labels, device=z.device)
        per_anchor = -(log_prob * positives).sum(1) / positives.sum(1)
        return per_anchor.mean()


def chance_level(num_images: int) -> float:
    """
    The value :math:`\\ln(2B - 1)` of the image-wise loss of Eq. (1) without a meta label (SimCLR's NT-Xent) when
    all 2B embeddings of a two-view batch of B images are identical: every anchor's softmax is uniform over its
    2B - 1 others, so the log-probability of its positive is :math:`-\\ln(2B - 1)`. A loss that stays there means a
    collapsed representation.

    Args:
        num_images: B, the number of images of the (gathered) batch, at least 1.

    Raises:
        ValueError: when ``num_images < 1``.

    Example:
        >>> round(chance_level(4), 4)  # ln(7)
        1.9459
    """
    if num_images < 1:
        raise ValueError(f"num_images must be at least 1, got {num_images}.")
    return math.log(2 * num_images - 1)
