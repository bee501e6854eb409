"""``MirroredInferer``: the mean of the logits over the mirror images of the input, each output flipped back;
hand-computed on a position-dependent "network", and wired into the inference and evaluation bundles."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from monai.bundle import ConfigParser
from monai.inferers import SimpleInferer, SliceInferer

from gcl_monai.engines import MirroredInferer

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
DEMO = REPO / "bundles" / "gcl_demo" / "configs"
WEIGHT = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # a weight per pixel: the "network" is not mirror-symmetric


class Weighting(torch.nn.Module):
    """out = x * WEIGHT, a function of position, so a mirrored pass sees the mirrored weight; counts its calls."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * WEIGHT


def test_no_axes_is_the_wrapped_inferer_bit_for_bit():
    x, net = torch.randn(2, 3, 2, 3), Weighting()
    out = MirroredInferer(SimpleInferer(), spatial_axes=[])(x, net)
    assert torch.equal(out, x * WEIGHT) and net.calls == 1


def test_one_axis_averages_the_weight_and_its_mirror():
    # the mirrored pass gives flip(flip(x) * W) = x * flip(W): the mean weight per row of W and its mirror along
    # the second axis is (1 + 3) / 2 = 2 in the first row and (4 + 6) / 2 = 5 in the second
    x, net = torch.ones(1, 1, 2, 3), Weighting()
    out = MirroredInferer(SimpleInferer(), spatial_axes=[1])(x, net)
    torch.testing.assert_close(out[0, 0], torch.tensor([[2.0, 2.0, 2.0], [5.0, 5.0, 5.0]]))
    assert net.calls == 2


def test_both_axes_average_the_four_mirror_images():
    # every pixel's orbit under the two flips sums to 14 ((1 + 3 + 4 + 6) at a corner, (2 + 5) twice in the
    # middle column): the mean weight is 3.5 everywhere
    x, net = torch.randn(1, 1, 2, 3), Weighting()
    out = MirroredInferer(SimpleInferer(), spatial_axes=[0, 1])(x, net)
    torch.testing.assert_close(out, 3.5 * x)
    assert net.calls == 4


def test_slice_by_slice_mirrors_each_slice_in_plane():
    # a 2D network on each slice of an (H, W, D) volume: mirroring the volume in-plane mirrors every slice, and the
    # slices come back in their own order
    x = torch.randn(1, 1, 2, 3, 5)
    net = Weighting()
    out = MirroredInferer(SliceInferer(roi_size=(2, 3), spatial_dim=2, sw_batch_size=5), spatial_axes=[0, 1])(x, net)
    torch.testing.assert_close(out, 3.5 * x)
    assert net.calls == 4  # one call per mirror image, the 5 slices batched


@pytest.mark.parametrize(("axes", "message"), [([0, 0], "distinct"), ([-1], "distinct"), ([0, 2], "2 spatial")])
def test_bad_axes_are_refused_by_name(axes, message):
    with pytest.raises(ValueError, match=message):
        MirroredInferer(SimpleInferer(), spatial_axes=axes)(torch.zeros(1, 1, 2, 3), Weighting())


@pytest.mark.parametrize("files", [["inference.json"], ["train.json", "evaluate.json"]])
def test_the_bundles_mirror_in_plane_on_request(files):
    parser = ConfigParser()
    parser.read_config([str(DEMO / f) for f in files])
    key = "inferer" if files == ["inference.json"] else "evaluate#inferer"
    default = parser.get_parsed_content(key, instantiate=True)
    assert isinstance(default, MirroredInferer) and default.spatial_axes == ()
    parser.update({"mirror_axes": [0, 1]})
    mirrored = parser.get_parsed_content(key, instantiate=True, lazy=False)
    assert mirrored.spatial_axes == (0, 1) and isinstance(mirrored.inferer, SliceInferer)
    # with the demo's network, mirroring over the group of in-plane flips makes the prediction mirror-equivariant,
    # which one pass is not
    network = parser.get_parsed_content("network_def").eval()
    x = torch.rand(1, 1, 48, 48, 2)
    with torch.no_grad():
        torch.testing.assert_close(mirrored(torch.flip(x, [3]), network), torch.flip(mirrored(x, network), [3]))
        one_pass = torch.flip(default(x, network), [3]) - default(torch.flip(x, [3]), network)
    assert one_pass.abs().max() > 1e-3
