"""Kept encoders: bfloat16 weights with a card, restored in float32, refused by name on any mismatch."""

import json

import pytest
import torch
from monai.networks.nets import BasicUNet

from gcl_monai.networks import keep_encoder, pretrained_encoder, restore_encoder
from tests.networks.network_helpers import FEATURES


def test_round_trip_restores_float32_within_bfloat16_rounding(encoder_pt, tmp_path):
    card = keep_encoder(encoder_pt, tmp_path / "kept" / "gcl_s0.pt", recipe="gcl", seed=0, commit="abc", probe=0.5)
    assert card["architecture"] == {"spatial_dims": 2, "in_channels": 1, "features": list(FEATURES[:5])}
    assert card["recipe"] == "gcl" and card["stored_dtype"] == "bfloat16"
    assert json.loads((tmp_path / "kept" / "gcl_s0.json").read_text()) == card
    original = torch.load(encoder_pt, weights_only=True)
    stored = torch.load(tmp_path / "kept" / "gcl_s0.pt", weights_only=True)
    assert all(v.dtype == torch.bfloat16 for v in stored.values() if v.is_floating_point())
    restored = restore_encoder(tmp_path / "kept" / "gcl_s0.json", features=FEATURES, in_channels=1)
    assert restored.keys() == original.keys()
    for key, value in original.items():
        if value.is_floating_point():
            assert restored[key].dtype == torch.float32
            # bfloat16 keeps 8 significant bits: a relative rounding of at most 2^-8 (round to nearest: 2^-9)
            assert torch.allclose(restored[key], value, rtol=2**-8, atol=1e-30), key
        else:
            assert torch.equal(restored[key], value)
    # it loads into the fine-tuning network as encoder.pt does
    unet = BasicUNet(spatial_dims=2, features=FEATURES)
    missing, unexpected = unet.load_state_dict(restored, strict=False)
    assert not unexpected and all(not k.startswith(("conv_0", "down_")) for k in missing)


def test_mismatches_are_refused_by_name(encoder_pt, tmp_path):
    keep_encoder(encoder_pt, tmp_path / "e.pt", recipe="gcl")
    card = tmp_path / "e.json"
    with pytest.raises(ValueError, match=r"e\.json: features \[8, 8, 16, 16, 32\] of the encoder.*\[16, 32, 64"):
        restore_encoder(card, features=(16, 32, 64, 128, 256, 16))
    with pytest.raises(ValueError, match="in_channels 1 of the encoder, but the network has 2"):
        restore_encoder(card, in_channels=2)
    weights = torch.load(tmp_path / "e.pt", weights_only=True)
    weights["conv_0.conv_0.conv.weight"] += 1
    torch.save(weights, tmp_path / "e.pt")
    with pytest.raises(ValueError, match=r"sha256 of e\.pt differs"):
        restore_encoder(card)


def test_fine_tuning_takes_a_card_or_an_encoder_file(encoder_pt, tmp_path):
    assert pretrained_encoder(encoder_pt, FEATURES, tmp_path) == str(encoder_pt)  # as it is, nothing read
    keep_encoder(encoder_pt, tmp_path / "kept.pt", recipe="gcl")
    restored = pretrained_encoder(tmp_path / "kept.json", FEATURES, tmp_path / "run")
    state = torch.load(restored, weights_only=True)
    assert restored.endswith("run/kept.pt") and state["down_4.convs.conv_1.conv.weight"].dtype == torch.float32
