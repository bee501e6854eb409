"""Effective rank of convolution weights (Roy & Vetterli 2007) on hand-computed cases."""

import math

import pytest
import torch
from monai.networks.nets import BasicUNet

from gcl_monai.diagnose import effective_rank, encoder_weight_ranks


def test_effective_rank_hand_cases():
    assert effective_rank(torch.eye(5)) == pytest.approx(5.0)
    assert effective_rank(torch.outer(torch.arange(1.0, 4.0), torch.ones(6))) == pytest.approx(1.0)
    assert effective_rank(torch.diag(torch.tensor([2.0, 2.0, 0.0, 0.0]))) == pytest.approx(2.0)
    # singular values 2 and 1: p = (0.8, 0.2), exp(-(0.8 ln 0.8 + 0.2 ln 0.2))
    expected = math.exp(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2)))
    assert effective_rank(torch.diag(torch.tensor([2.0, 1.0]))) == pytest.approx(expected)
    # a convolution is read as (out, in * kernel): invariant to scale and to orthogonal mixing of the outputs
    conv = torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(0))
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(1)))
    mixed = (q @ conv.flatten(1)).reshape(conv.shape)
    assert effective_rank(3 * mixed) == pytest.approx(effective_rank(conv))
    with pytest.raises(ValueError, match="all-zero"):
        effective_rank(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="non-finite"):
        effective_rank(torch.tensor([[1.0, float("nan")]]))


def test_encoder_weight_ranks_of_a_fresh_and_of_a_collapsed_encoder():
    torch.manual_seed(0)
    state = BasicUNet(spatial_dims=2, in_channels=1, out_channels=2, features=(4, 8, 8, 16, 32, 4)).state_dict()
    ranks = encoder_weight_ranks(state)
    deepest = ranks["down_4.convs.conv_1.conv.weight"]
    assert deepest[1] == 32 and 0.8 * 32 < deepest[0] <= 32  # fresh: close to full rank
    assert all(not k.endswith("bias") for k in ranks)
    weight = state["down_4.convs.conv_1.conv.weight"]
    collapsed = torch.outer(torch.randn(32), torch.randn(weight[0].numel())).reshape(weight.shape)
    assert encoder_weight_ranks({"deep.weight": 0.01 * weight + collapsed})["deep.weight"][0] < 3
