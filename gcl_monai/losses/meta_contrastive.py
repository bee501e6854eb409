"""Image-wise contrastive loss guided by one meta label (Eq. 1); without a label it is SimCLR's NT-Xent."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from monai.utils import look_up_option
from torch.nn.modules.loss import _Loss

__all__ = ["MetaContrastiveLoss", "positive_mask", "chance_level", "LOSS_FORMS"]

#: ``"out"``: Eq. (1) as written, the mean over positives outside the log (SupCon's L_out);
#: ``"in"``: the mean over positives inside the log (SupCon's L_in, Khosla et al., NeurIPS 2020, Eq. 3).
LOSS_FORMS = ("out", "in")


def chance_level(num_images: int) -> float:
    """
    :math:`\\ln(2N - 1)`: the value of the image-wise loss of a two-view batch of ``num_images`` images when all
    2N representations are identical (collapse), which is also its value at a uniform start, for every loss form
    and every meta label.
    """
    if num_images < 1:
        raise ValueError(f"num_images must be at least 1, got {num_images}.")
    return math.log(2 * num_images - 1)


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

    Two departures from the literal Eq. (1) are selectable (both off by default, which is the paper):

    - ``loss_form="in"`` moves the mean over positives inside the log (SupCon's :math:`L_{in}`,
      Khosla et al., NeurIPS 2020):
      :math:`-\\log \\frac{1}{|P_i|} \\sum_{j \\in P_i} p_{ij}` with
      :math:`p_{ij} = \\exp(z_i \\cdot z_j / \\tau) / \\sum_{a \\neq i} \\exp(z_i \\cdot z_a / \\tau)`.
      With a meta label shared by many rows, the paper's form (:math:`L_{out}`) scores an encoder that tells
      images apart but not yet the meta classes far above a collapsed one (for N = 48 images, 47 positives,
      tau = 0.1: 9.79 against ln 95 = 4.55), so a near-collapsed start is a trap; :math:`L_{in}` scores the same
      encoder ln 47 = 3.85, below collapse, and reaches the same floor ln |P| when the classes are separated.
    - ``view_weight`` gives the other view of the same image a weight of its own among the positives: it
      weighs ``view_weight`` and the remaining positives share ``1 - view_weight`` (in the average of the
      log-probabilities for ``"out"``, of the probabilities for ``"in"``); None weighs every positive equally as
      in Eq. (1). Without other positives (a singleton meta class, or SimCLR) the view weighs 1.

    Args:
        temperature: :math:`\\tau` (0.1 in the paper).
        loss_form: ``"out"`` (Eq. 1 as written) or ``"in"``.
        view_weight: weight of the other view among the positives, in ``[0, 1]``, or None (uniform).

    Raises:
        ValueError: when ``temperature`` is not positive, ``loss_form`` is unknown or ``view_weight`` is
            outside ``[0, 1]``.

    Example::

        loss = MetaContrastiveLoss(temperature=0.1)
        z = torch.randn(8, 128)                       # 2 views of 4 images
        l_simclr = loss(z)
        l_quantile = loss(z, labels=torch.tensor([1, 1, 3, 4]))
        l_in = MetaContrastiveLoss(temperature=0.1, loss_form="in")(z, labels=torch.tensor([1, 1, 3, 4]))
    """

    def __init__(self, temperature: float = 0.1, loss_form: str = "out", view_weight: float | None = None) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}.")
        if view_weight is not None and not 0.0 <= view_weight <= 1.0:
            raise ValueError(f"view_weight must be in [0, 1] or None, got {view_weight}.")
        self.temperature = temperature
        self.loss_form = look_up_option(loss_form, LOSS_FORMS)
        self.view_weight = view_weight

    def _positive_weights(self, num_images: int, labels: torch.Tensor | None, device: torch.device) -> torch.Tensor:
        """(2N, 2N) weights of the positives of each row, summing to 1 per row."""
        positives = positive_mask(num_images, labels, device=device).to(torch.float32)
        if self.view_weight is None or labels is None:
            return positives / positives.sum(1, keepdim=True)
        view = torch.eye(num_images, device=device).repeat(2, 2).fill_diagonal_(0.0)
        others = positives - view
        num_others = others.sum(1, keepdim=True)
        view_share = torch.where(num_others > 0, self.view_weight, 1.0)
        return view * view_share + others * (1.0 - view_share) / num_others.clamp_min(1.0)

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
        self_mask = torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
        log_prob = logits - torch.logsumexp(logits.masked_fill(self_mask, float("-inf")), dim=1, keepdim=True)
        weights = self._positive_weights(z.shape[0] // 2, labels, z.device).to(log_prob.dtype)
        if self.loss_form == "out":
            per_anchor = -(log_prob * weights).sum(1)
        else:  # -log sum_j w_ij p_ij, over the positives only
            per_anchor = -torch.logsumexp(log_prob.masked_fill(weights == 0, float("-inf")) + weights.log(), dim=1)
        return per_anchor.mean()
