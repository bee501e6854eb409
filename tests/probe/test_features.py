"""The frozen encoder's features: batch-norm statistics recomputed, a pre-training network's encoder loaded, a missing
or mismatched encoder named."""

import pytest
import torch
from monai.networks.nets import BasicUNet

from gcl_monai.networks import GCLNet
from gcl_monai.probe import EncoderMismatch, FrozenEncoder, recompute_batch_norm
from tests.probe.probe_helpers import FEATURES


def test_recompute_batch_norm_sets_the_data_statistics_and_eval_mode():
    torch.manual_seed(0)
    encoder = FrozenEncoder(FEATURES, "batch", (8, 8))
    images = torch.rand(8, 1, 16, 16) * 3 + 1
    assert recompute_batch_norm(encoder, images, batch_size=4) == 10
    first = encoder.levels[0].conv_0
    out = first.conv(images)
    torch.testing.assert_close(first.adn.N.running_mean, out.mean((0, 2, 3)), rtol=1e-4, atol=1e-5)
    assert not encoder.training and first.adn.N.momentum == 0.1
    assert recompute_batch_norm(FrozenEncoder(FEATURES, "instance", (8, 8)), images) == 0


def test_the_encoder_of_a_pretraining_network_gives_its_features():
    torch.manual_seed(0)
    net = GCLNet(features=FEATURES, norm="batch").eval()
    encoder = FrozenEncoder(FEATURES, "batch", (2, 2)).load_encoder(net.encoder_state_dict(), "net")
    x = torch.rand(2, 1, 32, 32)
    deepest = encoder(x)[:, -FEATURES[4] :]
    torch.testing.assert_close(deepest, net(x)["features"])  # 32 / 16 = 2: the deepest level is not resized
    assert encoder(x).shape == (2, sum(FEATURES[:5]), 2, 2)


def test_a_missing_or_mismatched_encoder_is_named(tmp_path):
    encoder = FrozenEncoder(FEATURES, "batch", (8, 8))
    with pytest.raises(EncoderMismatch, match="does not exist"):
        encoder.load_file(tmp_path / "none.pt")
    wide = tmp_path / "wide.pt"
    torch.save(BasicUNet(2, 1, 2, features=[8, 8, 16, 16, 32, 8]).state_dict(), wide)
    with pytest.raises(EncoderMismatch, match=r"wide\.pt does not fit .*shapes conv_0"):
        encoder.load_file(wide)
    heads_only = tmp_path / "heads.pt"
    torch.save({"h_img.0.weight": torch.zeros(1)}, heads_only)
    with pytest.raises(EncoderMismatch, match="holds no encoder key"):
        encoder.load_file(heads_only)
