"""GradFilter (Sec. 3.3, Eq. 8-9): keep the positives with the smallest gradient magnitude, at a self-paced rate."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["pace", "GradFilter", "LastLayerJacobian"]


def pace(step: int, total_steps: int) -> float:
    """
    Fraction of each positive pool kept at ``step`` (Eq. 9 divided by :math:`|P_u|`):
    :math:`\\min(1, \\max(0, 1 + \\frac{1}{4}\\log(t / T + e^{-4})))`.

    It starts at 0 (one positive, the most certain one, is always kept) and reaches 1 at ``total_steps``.

    Raises:
        ValueError: when ``total_steps`` is not positive or ``step`` is negative.
    """
    if total_steps <= 0:
        raise ValueError(f"total_steps must be positive, got {total_steps}.")
    if step < 0:
        raise ValueError(f"step must be non-negative, got {step}.")
    return min(1.0, max(0.0, 1.0 + math.log(step / total_steps + math.exp(-4.0)) / 4.0))


class LastLayerJacobian:
    """
    Carries a gradient with respect to the L2-normalised pixel embeddings :math:`u` back through the pixel head
    :math:`h_{pix}` to the parameters of the encoder's last layer, in closed form, for many gradients at once.

    For an anchor pixel with normalised embedding :math:`u = v / \\|v\\|`, :math:`v = W_2\\,\\mathrm{ReLU}(W_1 f + b_1)
    + b_2` and encoder feature :math:`f = \\mathrm{act}(\\mathrm{norm}(y))`, :math:`y = W * x + b` (the last
    convolution, input patch :math:`x_{patch}` at that pixel), a gradient :math:`g = \\partial\\ell/\\partial u`
    gives :math:`\\partial\\ell/\\partial y = s \\odot W_1^T (r \\odot W_2^T (g - (g\\cdot u)u)/\\|v\\|)` with
    :math:`r` the ReLU mask and :math:`s` the derivative of act(norm(.)), and

    .. math:: \\|\\partial\\ell/\\partial (W, b)\\| = \\|\\partial\\ell/\\partial y\\| \\sqrt{\\|x_{patch}\\|^2 + 1}.

    What is approximated: the normalisation layer's statistics (instance, batch or group mean and variance) are
    held constant, so its derivative is the per-channel scale :math:`\\gamma / \\sqrt{\\sigma^2 + \\epsilon}`;
    dropout in the last layer is treated as the identity. Everything else is exact: with no normalisation, or
    batch normalisation in evaluation mode, the magnitudes equal autograd's (see the tests). Only the path
    through the anchor's embedding is followed, as in Eq. (8): positives and negatives are constants.

    Args:
        pix: (B, D, *spatial) output of the pixel head, before normalisation.
        last_input: (B, C_in, *spatial') input of the encoder's last convolution.
        last_conv: (B, C, *spatial) output of that convolution, before normalisation.
        pixel_head: the pixel head (1x1 conv, ReLU, 1x1 conv).
        last_layer: the encoder's last MONAI ``Convolution`` block (``.conv`` and ``.adn``).
    """

    def __init__(
        self,
        pix: torch.Tensor,
        last_input: torch.Tensor,
        last_conv: torch.Tensor,
        pixel_head: nn.Sequential,
        last_layer: nn.Module,
    ) -> None:
        with torch.no_grad():
            conv_in, _, conv_out = pixel_head
            v = pix.detach().flatten(2).transpose(1, 2)  # (B, HW, D)
            norm = v.norm(dim=-1).clamp_min(1e-12)
            # W_2^T u of every pixel: the pixel head's output layer applied backwards once, shared by all pools
            self.head_u = (v / norm.unsqueeze(-1)) @ conv_out.weight.detach().flatten(1)  # (B, HW, Hd)
            feats, scale = _adn_linearisation(last_layer.adn, last_conv.detach())
            # pixel-major like head_u, so that broadcasting them over a pool runs along contiguous rows
            self.hidden_mask = (conv_in(feats) > 0).flatten(2).transpose(1, 2).to(v.dtype).contiguous()  # (B, HW, Hd)
            self.w_in = conv_in.weight.detach().flatten(1)  # (Hd, C)
            self.feature_scale = scale.flatten(2).transpose(1, 2).contiguous()  # (B, HW, C)
            patch = _patch_norm(last_layer.conv, last_input.detach()).flatten(1)
            self.anchor_factor = patch / norm  # (B, HW): ||x_patch|| (with bias) / ||v||

    @classmethod
    def from_output(cls, network: nn.Module, output: dict[str, torch.Tensor]) -> LastLayerJacobian:
        """Build from a :py:class:`gcl_monai.networks.GCLNet` and its forward output."""
        return cls(output["pix"], output["last_input"], output["last_conv"], network.h_pix, network.last_layer)

    def pool_magnitudes(
        self,
        anchors: torch.Tensor,
        positives: torch.Tensor,
        pool: torch.Tensor,
        neg_weights: torch.Tensor,
        pos_cos: torch.Tensor,
        neg_cos: torch.Tensor,
        pos_weight: torch.Tensor,
        max_block_elements: int | None = None,
    ) -> torch.Tensor:
        r"""
        Magnitudes of the gradients :math:`g^+ = -w^+ (u^+ - \bar u^-)` of Eq. (8), one per positive of each pool.

        By linearity, :math:`W_2^T (I - u u^T) g^+ = -w^+ (W_2^T u^+ - W_2^T \bar u^- - d\, W_2^T u)` with
        :math:`d = u\cdot u^+ - u\cdot\bar u^-`; :math:`W_2^T u` is precomputed per pixel and
        :math:`W_2^T \bar u^-` is one product per anchor pixel, so the work per positive is that difference in the
        hidden space, the anchor's ReLU mask, one row of a product with :math:`W_1`, the anchor's normalisation
        slope and a norm. The difference is formed before the product, not expanded inside the norm, so that a
        small magnitude (the ones GradFilter keeps) is not the difference of large terms.

        Args:
            anchors: (P,) batch index of each pair's anchor image.
            positives: (P,) batch index of each pair's positive image.
            pool: (P, HW, K) indices of each anchor pixel's positive pool in the positive image.
            neg_weights: (P, HW, HW') softmax weights of the negatives (0 on the pool), so that
                :math:`\bar u^- = ` ``neg_weights @ u``.
            pos_cos: (P, HW, K) :math:`u\cdot u^+`.
            neg_cos: (P, HW) :math:`u\cdot \bar u^-`.
            pos_weight: (P, HW, K) the non-negative scalar :math:`w^+`.
            max_block_elements: pairs are processed in blocks whose largest temporary, (pairs, HW, K, C) values,
                holds at most this many elements (at least one pair per block); None: all pairs at once. Blocks
                that fit a CPU's cache are about twice as fast there (docs/results/speed.md); the values do not
                depend on it.

        Returns:
            (P, HW, K) Frobenius norms of the gradients w.r.t. the last layer's weight and bias.
        """
        per_pair = pool.shape[1] * pool.shape[2] * max(self.w_in.shape)
        block = len(anchors) if max_block_elements is None else max(1, max_block_elements // per_pair)
        args = (anchors, positives, pool, neg_weights, pos_cos, neg_cos, pos_weight)
        if block >= len(anchors):
            return self._block_magnitudes(*args)
        return torch.cat([self._block_magnitudes(*part) for part in zip(*(t.split(block) for t in args))])

    def _block_magnitudes(self, anchors, positives, pool, neg_weights, pos_cos, neg_cos, pos_weight) -> torch.Tensor:
        """:py:meth:`pool_magnitudes` of one block of pairs."""
        num_pixels, hidden = self.head_u.shape[1:]
        head_neg = neg_weights @ self.head_u[positives]  # (P, HW, Hd): W_2^T ubar^-
        d = pos_cos - neg_cos.unsqueeze(-1)  # (P, HW, K)
        # W_2^T u^+ of every positive, gathered from the flattened (B HW', Hd) table: the one (P, HW, K, Hd) tensor
        rows = (positives[:, None, None] * num_pixels + pool).flatten()
        diff = self.head_u.reshape(-1, hidden).index_select(0, rows).view(*pool.shape, hidden)
        diff.sub_(head_neg.unsqueeze(2)).addcmul_(d.unsqueeze(-1), self.head_u[anchors].unsqueeze(2), value=-1.0)
        diff.mul_(self.hidden_mask[anchors].unsqueeze(2))
        # s * W_1^T (r * (W_2^T u^+ - W_2^T ubar^- - d W_2^T u)): (P, HW, K, C)
        grad_features = (diff @ self.w_in).mul_(self.feature_scale[anchors].unsqueeze(2))
        magnitude = torch.linalg.vector_norm(grad_features, dim=-1)
        return magnitude * pos_weight * self.anchor_factor[anchors].unsqueeze(-1)


def _adn_linearisation(adn: nn.Module, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """
    ``adn(y)`` and its elementwise derivative w.r.t. ``y`` with the normalisation statistics held constant,
    without touching the layer's running statistics.
    """
    norm = getattr(adn, "N", None)
    scale = torch.ones_like(y)
    pre_act = y
    if norm is not None:
        reduce_dims = tuple(range(2, y.ndim))
        channel_shape = (1, -1) + (1,) * len(reduce_dims)
        uses_running = not norm.training and getattr(norm, "running_var", None) is not None
        if isinstance(norm, (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)) and uses_running:
            mean, var = norm.running_mean.view(channel_shape), norm.running_var.view(channel_shape)
        elif isinstance(norm, nn.modules.instancenorm._InstanceNorm):
            var, mean = torch.var_mean(y, dim=reduce_dims, unbiased=False, keepdim=True)
        elif isinstance(norm, nn.modules.batchnorm._BatchNorm):
            var, mean = torch.var_mean(y, dim=(0,) + reduce_dims, unbiased=False, keepdim=True)
        elif isinstance(norm, nn.GroupNorm):
            var, mean = torch.var_mean(y.reshape(y.shape[0], norm.num_groups, -1), dim=-1, unbiased=False)
            per_group = y.shape[1] // norm.num_groups
            var = var.repeat_interleave(per_group, dim=1).view(*y.shape[:2], *([1] * len(reduce_dims)))
            mean = mean.repeat_interleave(per_group, dim=1).view(*y.shape[:2], *([1] * len(reduce_dims)))
        else:
            raise NotImplementedError(f"GradFilter's closed form does not support normalisation {type(norm).__name__}.")
        scale = scale / torch.sqrt(var + norm.eps)
        pre_act = (y - mean) * scale
        if getattr(norm, "weight", None) is not None:
            scale = scale * norm.weight.view(channel_shape)
            pre_act = pre_act * norm.weight.view(channel_shape) + norm.bias.view(channel_shape)
    act = getattr(adn, "A", None)
    if act is None:
        return pre_act, scale
    with torch.enable_grad():
        a = pre_act.detach().requires_grad_(True)
        out = act(a.clone())
        (act_grad,) = torch.autograd.grad(out.sum(), a)
    return out.detach(), scale * act_grad


def _patch_norm(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """sqrt(||input patch||^2 + 1) (or without the 1 when the convolution has no bias) at each output pixel."""
    if conv.groups != 1 or conv.padding_mode != "zeros":
        raise NotImplementedError("GradFilter's closed form needs an ungrouped, zero-padded last convolution.")
    conv_fn = (F.conv1d, F.conv2d, F.conv3d)[x.ndim - 3]
    ones = torch.ones(1, x.shape[1], *conv.kernel_size, dtype=x.dtype, device=x.device)
    sq = conv_fn(x * x, ones, stride=conv.stride, padding=conv.padding, dilation=conv.dilation)
    return torch.sqrt(sq + (1.0 if conv.bias is not None else 0.0)).squeeze(1)


class GradFilter:
    """
    Keeps, from each pixel's positive pool :math:`P_u`, the ``max(1, ceil(keep_fraction * |P_u|))`` positives
    whose loss term has the smallest gradient magnitude w.r.t. the encoder's last layer (Sec. 3.3). A pace
    handler sets ``keep_fraction`` from :py:func:`pace` at each iteration (Eq. 9).

    Args:
        keep_fraction: initial fraction of each pool kept, in [0, 1].
    """

    def __init__(self, keep_fraction: float = 1.0) -> None:
        self.keep_fraction = keep_fraction

    @property
    def keep_fraction(self) -> float:
        return self._keep_fraction

    @keep_fraction.setter
    def keep_fraction(self, value: float) -> None:
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise ValueError(f"keep_fraction must be in [0, 1], got {value}.")
        self._keep_fraction = float(value)

    def num_keep(self, pool_size: int) -> int:
        """Number of positives kept from a pool of ``pool_size``."""
        return max(1, math.ceil(self.keep_fraction * pool_size))

    def keep_mask(self, magnitudes: torch.Tensor) -> torch.Tensor:
        """
        Args:
            magnitudes: (..., K) gradient magnitudes of the K positives of each pool.

        Returns:
            boolean mask of the same shape, True for the ``num_keep(K)`` smallest magnitudes of each pool.
        """
        pool_size = magnitudes.shape[-1]
        keep = self.num_keep(pool_size)
        if keep >= pool_size:
            return torch.ones_like(magnitudes, dtype=torch.bool)
        idx = magnitudes.topk(keep, dim=-1, largest=False).indices
        return torch.zeros_like(magnitudes, dtype=torch.bool).scatter_(-1, idx, True)

    def state_dict(self) -> dict:
        return {"keep_fraction": self.keep_fraction}

    def load_state_dict(self, state: dict) -> None:
        self.keep_fraction = state["keep_fraction"]
