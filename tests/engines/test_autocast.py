"""AutocastInferer: bfloat16 forward, float32 out, gradients through, and exactly SimpleInferer when disabled."""

import pytest
import torch
from monai.inferers import SimpleInferer
from monai.networks.nets import BasicUNet

from gcl_monai.engines import AutocastInferer


def _net():
    torch.manual_seed(0)
    return BasicUNet(spatial_dims=2, in_channels=1, out_channels=3, features=(4, 4, 8, 8, 16, 4))


def test_disabled_is_simple_inferer_bit_for_bit():
    net, x = _net(), torch.rand(2, 1, 32, 32)
    assert torch.equal(AutocastInferer(enabled=False)(x, net), SimpleInferer()(x, net))


def test_enabled_runs_the_convolutions_in_bfloat16_and_returns_float32():
    net, x = _net(), torch.rand(2, 1, 32, 32)
    seen = []
    net.final_conv.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    out = AutocastInferer(enabled=True, device="cpu")(x, net)
    assert seen == [torch.bfloat16] and out.dtype == torch.float32
    reference = SimpleInferer()(x, net)
    # bfloat16 keeps 8 bits of mantissa: close to float32, not equal
    assert not torch.equal(out, reference) and torch.allclose(out, reference, atol=0.05, rtol=0.05)
    out.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in net.parameters())


def test_a_non_floating_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="int8"):
        AutocastInferer(dtype=torch.int8)
