"""
The frozen encoder of a probe: a BasicUNet encoder (``conv_0``, ``down_1`` .. ``down_4``) loaded from an encoder
file, a pre-training network or a seed, its five levels upsampled to one grid and concatenated per pixel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from monai.networks.nets import BasicUNet

from gcl_monai.networks import ENCODER_PREFIXES

__all__ = ["BN_STATS", "EncoderMismatch", "FrozenEncoder", "recompute_batch_norm"]

#: how a probe treats the encoder's batch-norm statistics: ``"recompute"`` re-estimates them on the probe's training
#: slices (the pre-training's running statistics come from augmented views and differ between encoders in ways that
#: are not the representation's); ``"stored"`` uses them as the encoder file holds them.
BN_STATS = ("recompute", "stored")


class EncoderMismatch(ValueError):
    """An encoder file that is missing, holds no encoder, or does not fit the network the bundle builds."""


class FrozenEncoder(nn.Module):
    """
    The encoder of :py:class:`monai.networks.nets.BasicUNet` (the network GCL's encoder initialises), frozen, whose
    output per pixel is the concatenation of its five levels (``conv_0`` at full resolution .. ``down_4`` at 1/16),
    each resized bilinearly to ``grid`` (a dense "hypercolumn" of ``sum(features[:5])`` channels).

    Args:
        features: BasicUNet's six feature sizes (the bundle's ``features``).
        norm: BasicUNet's normalisation (the bundle's ``norm``).
        grid: the in-plane size of the output features.
        spatial_dims: 2 (the slices of the bundles).
        in_channels: image channels.
    """

    def __init__(
        self,
        features: Sequence[int],
        norm: str | tuple,
        grid: Sequence[int],
        spatial_dims: int = 2,
        in_channels: int = 1,
    ):
        super().__init__()
        unet = BasicUNet(
            spatial_dims=spatial_dims, in_channels=in_channels, out_channels=1, features=features, norm=norm
        )
        self.levels = nn.ModuleList([unet.conv_0, unet.down_1, unet.down_2, unet.down_3, unet.down_4])
        self.grid = tuple(int(g) for g in grid)
        self.requires_grad_(False)
        self.eval()

    def load_encoder(self, state: Mapping[str, torch.Tensor], source: str) -> FrozenEncoder:
        """
        Loads an encoder ``state_dict`` under BasicUNet's key names (``conv_0.*`` .. ``down_4.*``; other keys, such
        as a full U-Net's decoder or GCLNet's heads, are ignored).

        Raises:
            EncoderMismatch: no encoder key, a missing key or a shape that differs, naming ``source`` and the keys.
        """
        names = ("conv_0", "down_1", "down_2", "down_3", "down_4")
        encoder = {k: v for k, v in state.items() if k.startswith(ENCODER_PREFIXES)}
        if not encoder:
            raise EncoderMismatch(f"{source} holds no encoder key ({', '.join(ENCODER_PREFIXES)}).")
        own = {f"{names[int(k.split('.')[0])]}.{k.split('.', 1)[1]}": v for k, v in self.levels.state_dict().items()}
        missing = sorted(set(own) - set(encoder))
        wrong = sorted(k for k in own if k in encoder and encoder[k].shape != own[k].shape)
        if missing or wrong:
            shapes = ", ".join(f"{k} {tuple(encoder[k].shape)} != {tuple(own[k].shape)}" for k in wrong[:3])
            raise EncoderMismatch(
                f"{source} does not fit the bundle's encoder (features / norm): "
                f"missing {missing[:3]}{'...' if len(missing) > 3 else ''}; shapes {shapes or 'fit'}."
            )
        remapped = {f"{names.index(k.split('.')[0])}.{k.split('.', 1)[1]}": v for k, v in encoder.items() if k in own}
        self.levels.load_state_dict(remapped, strict=True)
        return self

    def load_file(self, path: str | Path) -> FrozenEncoder:
        """Loads an encoder file (``encoder.pt`` of a pre-training, or a U-Net's ``model.pt``).

        Raises:
            EncoderMismatch: the file does not exist, or as :py:meth:`load_encoder`.
        """
        path = Path(path)
        if not path.is_file():
            raise EncoderMismatch(f"encoder file {path} does not exist.")
        state = torch.load(path, map_location="cpu", weights_only=True)
        return self.load_encoder(state, str(path))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) images -> (B, sum(features[:5]), *grid) features."""
        x, out = images, []
        for level in self.levels:
            x = level(x)
            out.append(F.interpolate(x, size=self.grid, mode="bilinear", align_corners=False))
        return torch.cat(out, dim=1)


@torch.no_grad()
def recompute_batch_norm(encoder: FrozenEncoder, images: torch.Tensor, batch_size: int = 64) -> int:
    """
    Re-estimates the running statistics of every batch normalisation of ``encoder`` as the plain average over
    ``images`` (PyTorch's ``momentum=None``), then puts the encoder back in evaluation mode.

    Returns:
        the number of batch-norm layers re-estimated (0 for an encoder with instance normalisation).
    """
    norms = [m for m in encoder.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    if not norms:
        return 0
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    encoder.train()
    for batch in images.split(batch_size):
        for level in encoder.levels:
            batch = level(batch)
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    encoder.eval()
    return len(norms)
