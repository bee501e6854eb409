"""The GCL pre-training network: a BasicUNet encoder with an image-wise and a pixel-wise projection head."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
from monai.networks.layers.factories import Conv, Norm
from monai.networks.nets.basic_unet import Down, TwoConv
from monai.utils import ensure_tuple_rep, look_up_option

__all__ = ["GCLNet", "ProjectionHead", "ENCODER_PREFIXES", "IMAGE_POOLING", "trainable_parameters"]

#: top-level module names shared with :py:class:`monai.networks.nets.BasicUNet`'s encoder.
ENCODER_PREFIXES = ("conv_0.", "down_1.", "down_2.", "down_3.", "down_4.")

#: where the image-wise representation is pooled: ``"after_head"`` (GAP of the per-pixel :math:`h_{img}` map) or
#: ``"before_head"`` (:math:`h_{img}` of the globally average-pooled encoder features).
IMAGE_POOLING = ("after_head", "before_head")


class ProjectionHead(nn.Sequential):
    """
    1x1 convolution, ReLU, 1x1 convolution (the paper's :math:`h_{img}` and :math:`h_{pix}`, Sec. 4.2), or a
    deeper head with ``num_layers`` convolutions and a normalisation after each of them.

    Args:
        spatial_dims: number of spatial dimensions.
        in_channels: channels of the encoder output; also the hidden width, as in the paper.
        out_channels: dimension of the representation space (128 in the paper).
        num_layers: number of 1x1 convolutions (2 in the paper).
        norm: normalisation after every convolution, the last one included (a MONAI ``Norm`` name such as
            ``"batch"``, as in the projection heads of SimCLR v2 and MoCo v3), or None (the paper).

    Raises:
        ValueError: when ``num_layers < 1``.
    """

    def __init__(
        self, spatial_dims: int, in_channels: int, out_channels: int = 128, num_layers: int = 2, norm: str | None = None
    ):
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}.")
        conv = Conv[Conv.CONV, spatial_dims]
        layers: list[nn.Module] = []
        for _ in range(num_layers - 1):
            layers.append(conv(in_channels, in_channels, kernel_size=1))
            if norm is not None:
                layers.append(Norm[norm, spatial_dims](in_channels))
            layers.append(nn.ReLU())
        layers.append(conv(in_channels, out_channels, kernel_size=1))
        if norm is not None:
            layers.append(Norm[norm, spatial_dims](out_channels))
        super().__init__(*layers)


class GCLNet(nn.Module):
    """
    Encoder of a U-Net plus the two projection heads of GCL (Wu et al., ACM MM 2023, Fig. 2).

    The encoder modules (``conv_0``, ``down_1`` .. ``down_4``) are built exactly as in
    :py:class:`monai.networks.nets.BasicUNet`, so the encoder's ``state_dict`` entries load unchanged into a
    ``BasicUNet`` with the same ``features``, ``act``, ``norm``, ``bias`` and ``dropout`` (for example with
    ``monai.handlers.CheckpointLoader(..., strict=False)``; the heads' keys ``h_img.*`` and ``h_pix.*`` are
    simply unexpected there).

    The forward pass returns a dict:

        - ``"features"``: encoder output :math:`f(x)`, (B, C, h, w) with h = H / 16.
        - ``"img_map"``: :math:`h_{img}(f(x))` per pixel, (B, D, h, w); its cosine similarities are the pixel
          affinity of Eq. (6).
        - ``"img"``: the image-wise representation of Eq. (1), (B, D): global average pooling of ``img_map``
          (``image_pooling="after_head"``) or :math:`h_{img}` of the pooled features (``"before_head"``).
        - ``"pix"``: :math:`h_{pix}(f(x))`, (B, D, h, w): the pixel-wise representation of Eq. (5).
        - ``"last_input"`` and ``"last_conv"``: the input and the (pre-normalisation) output of the encoder's
          last convolution, used by GradFilter's closed-form gradient magnitudes.

    Args:
        spatial_dims: number of spatial dimensions (2 for the paper's slices).
        in_channels: number of input channels.
        features: BasicUNet's six feature sizes; the first five define the encoder (the last is unused here
            but kept so that the same tuple builds the segmentation network). The paper's encoder ends with 512.
        proj_dim: output dimension of both heads (128 in the paper).
        act: activation type and arguments, as in BasicUNet.
        norm: feature normalisation type and arguments, as in BasicUNet.
        bias: whether the convolutions have a bias term.
        dropout: dropout ratio.
        img_head_layers: number of 1x1 convolutions of :math:`h_{img}` (2 in the paper).
        img_head_norm: normalisation after every layer of :math:`h_{img}` (e.g. ``"batch"``), or None (the
            paper). A batch normalisation of the output centres the representations of a batch, so that a freshly
            initialised encoder does not map every image to nearly the same direction (which puts Eq. 1 at its
            collapse value from the first iteration). :math:`h_{pix}` always follows the paper (GradFilter's closed form
            relies on its 1x1 conv, ReLU, 1x1 conv structure).
        image_pooling: ``"after_head"`` (the default) or ``"before_head"``, see ``"img"`` above.
    """

    def __init__(
        self,
        spatial_dims: int = 2,
        in_channels: int = 1,
        features: Sequence[int] = (32, 32, 64, 128, 256, 32),
        proj_dim: int = 128,
        act: str | tuple = ("LeakyReLU", {"negative_slope": 0.1, "inplace": True}),
        norm: str | tuple = ("instance", {"affine": True}),
        bias: bool = True,
        dropout: float | tuple = 0.0,
        img_head_layers: int = 2,
        img_head_norm: str | None = None,
        image_pooling: str = "after_head",
    ):
        super().__init__()
        self.image_pooling = look_up_option(image_pooling, IMAGE_POOLING)
        fea = ensure_tuple_rep(features, 6)
        self.spatial_dims = spatial_dims
        self.conv_0 = TwoConv(spatial_dims, in_channels, fea[0], act, norm, bias, dropout)
        self.down_1 = Down(spatial_dims, fea[0], fea[1], act, norm, bias, dropout)
        self.down_2 = Down(spatial_dims, fea[1], fea[2], act, norm, bias, dropout)
        self.down_3 = Down(spatial_dims, fea[2], fea[3], act, norm, bias, dropout)
        self.down_4 = Down(spatial_dims, fea[3], fea[4], act, norm, bias, dropout)
        self.h_img = ProjectionHead(spatial_dims, fea[4], proj_dim, num_layers=img_head_layers, norm=img_head_norm)
        self.h_pix = ProjectionHead(spatial_dims, fea[4], proj_dim)

    @property
    def last_layer(self) -> nn.Module:
        """The encoder's last layer (convolution, normalisation, dropout, activation), GradFilter's reference."""
        return self.down_4.convs.conv_1

    def encoder_state_dict(self) -> dict[str, torch.Tensor]:
        """The encoder's parameters and buffers under BasicUNet's key names (no projection heads)."""
        return {k: v for k, v in self.state_dict().items() if k.startswith(ENCODER_PREFIXES)}

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.down_3(self.down_2(self.down_1(self.conv_0(x))))
        last_input = self.down_4.convs.conv_0(self.down_4.max_pooling(x))
        last_conv = self.last_layer.conv(last_input)
        features = self.last_layer.adn(last_conv)
        img_map = self.h_img(features)
        if self.image_pooling == "after_head":
            img = img_map.flatten(2).mean(-1)
        else:
            pooled = features.flatten(2).mean(-1).view(*features.shape[:2], *([1] * self.spatial_dims))
            img = self.h_img(pooled).flatten(1)
        return {
            "features": features,
            "img_map": img_map,
            "img": img,
            "pix": self.h_pix(features),
            "last_input": last_input,
            "last_conv": last_conv,
        }


def trainable_parameters(
    network: nn.Module, freeze_encoder: bool = False, encoder_lr: float | None = None
) -> list[nn.Parameter] | list[dict]:
    """
    Parameters of a BasicUNet-style segmentation network to optimise. With ``freeze_encoder`` the encoder
    (``conv_0``, ``down_1`` .. ``down_4``) is frozen (``requires_grad=False``) and only the decoder is returned:
    the paper's "Full model (frozen)" ablation. With ``encoder_lr`` (and a trainable encoder), two optimiser
    parameter groups: the encoder's with that learning rate, the decoder's with the optimiser's own (a pre-trained
    encoder fine-tuned more gently than a decoder that starts from random weights).
    """
    encoder, decoder = [], []
    for name, param in network.named_parameters():
        in_encoder = name.startswith(ENCODER_PREFIXES)
        frozen = freeze_encoder and in_encoder
        param.requires_grad_(not frozen)
        if not frozen:
            (encoder if in_encoder else decoder).append(param)
    if encoder_lr is None or not encoder:
        return [p for p in network.parameters() if p.requires_grad]
    return [{"params": encoder, "lr": encoder_lr}, {"params": decoder}]
