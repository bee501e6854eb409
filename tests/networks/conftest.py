"""Fixtures of the tests of gcl_monai.networks: a pre-training network's encoder saved to a file."""

import pytest
import torch

from gcl_monai.networks import GCLNet
from tests.networks.network_helpers import FEATURES


@pytest.fixture
def encoder_pt(tmp_path):
    torch.manual_seed(0)
    net = GCLNet(spatial_dims=2, features=FEATURES)
    path = tmp_path / "encoder.pt"
    torch.save(net.encoder_state_dict(), path)
    return path
