"""SliceWise: the 2D network applied slice by slice, with the 2D network's parameter names."""

import pytest
import torch
from monai.networks.nets import BasicUNet

from gcl_monai.networks import SliceWise


def _unet(seed=0):
    torch.manual_seed(seed)
    return BasicUNet(spatial_dims=2, out_channels=3, features=(8, 8, 16, 16, 32, 8), norm="batch").eval()


@pytest.mark.parametrize("slices_per_batch", [None, 1, 4])
def test_volume_is_segmented_slice_by_slice(slices_per_batch):
    unet = _unet()
    net = SliceWise(unet, slices_per_batch=slices_per_batch).eval()
    volume = torch.rand(2, 1, 32, 24, 5)
    with torch.no_grad():
        out = net(volume)
        expected = torch.stack([unet(volume[..., k]) for k in range(5)], dim=-1)
    assert out.shape == (2, 3, 32, 24, 5)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)  # batched vs one slice at a time


def test_state_dict_is_the_2d_networks():
    trained, fresh = _unet(0), _unet(1)
    net = SliceWise(fresh)
    assert sorted(net.state_dict()) == sorted(trained.state_dict())
    net.load_state_dict(trained.state_dict(), strict=True)
    for key, value in trained.state_dict().items():
        assert torch.equal(net.state_dict()[key], value), key
    back = _unet(2)
    back.load_state_dict(net.state_dict(), strict=True)  # and the other way
    with pytest.raises(RuntimeError, match="Missing key"):
        SliceWise(_unet()).load_state_dict({k: v for k, v in trained.state_dict().items() if "final" not in k})


def test_torchscript_and_bad_input():
    net = SliceWise(_unet(), slices_per_batch=2).eval()
    scripted = torch.jit.script(net)
    volume = torch.rand(1, 1, 32, 32, 3)
    torch.testing.assert_close(scripted(volume), net(volume))
    with pytest.raises(ValueError, match=r"\(B, C, H, W\) or of volumes"):
        net(torch.rand(1, 32, 32))
    with pytest.raises(ValueError, match="slices_per_batch"):
        SliceWise(_unet(), slices_per_batch=0)
