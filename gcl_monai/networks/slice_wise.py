"""A 2D network as a 3D model: applied slice by slice to a volume, with the 2D network's own weights."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

__all__ = ["SliceWise"]

_INNER = "network."


class SliceWise(nn.Module):
    """
    Applies a 2D network to every slice of a volume: a ``(B, C, H, W, D)`` input is segmented slice by slice along
    its last axis (the slices of a short-axis stack or of an axial series) and gives ``(B, K, H, W, D)``; a
    ``(B, C, H, W)`` input is a batch of slices, passed to the 2D network as it is.

    Its ``state_dict`` is the 2D network's, with the same names: the ``model.pt`` written by the fine-tuning of the
    2D network loads into it unchanged, and what it saves loads into the 2D network. A bundle's ``network_def``
    built with it is a 3D model on 3D images, as MONAI's ``verify_net_in_out`` and MONAI Label's
    ``BundleInferTask`` expect, and it exports to TorchScript (``ckpt_export``).

    Args:
        network: the 2D network, ``(N, C, H, W) -> (N, K, H, W)``.
        slices_per_batch: how many slices one call of ``network`` takes (None: all slices of the batch at once);
            only memory depends on it.

    Raises:
        ValueError: for ``slices_per_batch < 1``, or (in ``forward``) an input that is neither 4-D nor 5-D.

    Example:
        >>> from monai.networks.nets import BasicUNet
        >>> unet = BasicUNet(spatial_dims=2, out_channels=4, features=(8, 8, 16, 32, 64, 8))
        >>> net = SliceWise(unet).eval()
        >>> net(torch.rand(1, 1, 32, 32, 5)).shape
        torch.Size([1, 4, 32, 32, 5])
        >>> sorted(net.state_dict()) == sorted(unet.state_dict())
        True
    """

    def __init__(self, network: nn.Module, slices_per_batch: int | None = None):
        super().__init__()
        if slices_per_batch is not None and slices_per_batch < 1:
            raise ValueError(f"slices_per_batch must be at least 1, got {slices_per_batch}.")
        self.network = network
        self.slices_per_batch = slices_per_batch
        self.register_state_dict_post_hook(_strip_inner_prefix)
        self.register_load_state_dict_pre_hook(_add_inner_prefix)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 4:
            return self.network(x)
        if x.ndim != 5:
            raise ValueError("expected a batch of slices (B, C, H, W) or of volumes (B, C, H, W, D).")
        batch, channels, height, width, depth = x.shape
        slices = x.permute(0, 4, 1, 2, 3).reshape(batch * depth, channels, height, width)
        step = self.slices_per_batch if self.slices_per_batch is not None else slices.shape[0]
        outputs = [self.network(part) for part in slices.split(step)]
        out = torch.cat(outputs)
        return out.reshape(batch, depth, out.shape[1], out.shape[2], out.shape[3]).permute(0, 2, 3, 4, 1)


def _strip_inner_prefix(module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """``state_dict`` hook: ``<prefix>network.<name>`` -> ``<prefix><name>`` (the 2D network's names)."""
    for key in [k for k in state_dict if k.startswith(prefix + _INNER)]:
        state_dict[prefix + key[len(prefix + _INNER) :]] = state_dict.pop(key)


def _add_inner_prefix(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """``load_state_dict`` pre-hook: the 2D network's names ``<prefix><name>`` -> ``<prefix>network.<name>``."""
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + _INNER)]:
        state_dict[prefix + _INNER + key[len(prefix) :]] = state_dict.pop(key)
