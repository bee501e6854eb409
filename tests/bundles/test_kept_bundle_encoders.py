"""An encoder kept from a bundle's pre-training network (``python -m gcl_monai.networks.keep``) restores into the
same bundle's fine-tuning network: every encoder weight of ``train.json``'s ``network_def`` comes from the card. The
encoders kept this way that the ACDC and prostate bundles ship on main (``models/gcl_encoder.pt``) are restored by
``test_shipped_encoders.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from monai.bundle import ConfigParser

from gcl_monai.networks import restore_encoder
from gcl_monai.networks.gcl_net import ENCODER_PREFIXES
from gcl_monai.networks.keep import main as keep

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
BUNDLES = sorted(p.name for p in (REPO / "bundles").iterdir() if (p / "configs" / "pretrain.json").is_file())


def _parsed(bundle: str, config: str) -> ConfigParser:
    parser = ConfigParser()
    parser.read_config(str(REPO / "bundles" / bundle / "configs" / config))
    return parser


@pytest.mark.parametrize("bundle", BUNDLES)
def test_an_encoder_kept_from_pretraining_restores_into_fine_tuning(bundle, tmp_path):
    torch.manual_seed(0)
    pretrain_net = _parsed(bundle, "pretrain.json").get_parsed_content("network_def")
    encoder = tmp_path / "encoder.pt"
    torch.save(pretrain_net.encoder_state_dict(), encoder)
    assert keep([str(encoder), str(tmp_path / "models" / "gcl_encoder.pt"), "--field", f"bundle={bundle}"]) == 0
    train = _parsed(bundle, "train.json")
    restored = restore_encoder(
        tmp_path / "models" / "gcl_encoder.json",
        features=train.get_parsed_content("features"),
        in_channels=train["network_def"]["in_channels"],
    )
    torch.manual_seed(1)
    network = train.get_parsed_content("network_def")
    missing, unexpected = network.load_state_dict(restored, strict=False)
    assert not unexpected and not [k for k in missing if k.startswith(ENCODER_PREFIXES)]
    original = torch.load(encoder, weights_only=True)
    for key, value in network.state_dict().items():
        if key.startswith(ENCODER_PREFIXES) and value.is_floating_point():
            assert torch.allclose(value, original[key], rtol=2**-8, atol=1e-30), key
