"""The pre-trained encoder each bundle ships in ``models/`` (a kept encoder: bfloat16 weights with a card) restores
for the bundle's own fine-tuning network, card complete and checksum intact, on a fresh clone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from monai.bundle import ConfigParser

from gcl_monai.networks import restore_encoder
from gcl_monai.networks.gcl_net import ENCODER_PREFIXES

REPO = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").is_file())
SHIPPED = sorted(p.parents[1].name for p in (REPO / "bundles").glob("*/models/gcl_encoder.json"))
#: the bundles of the data sets this project trains on (docs/bundles.md, "Kept encoders")
MUST_SHIP = {"gcl_acdc", "gcl_prostate"}
CARD_FIELDS = ("dataset", "recipe", "seed", "commit", "command", "split", "terms", "probe_dice", "sha256")


def test_each_data_sets_bundle_ships_an_encoder():
    assert MUST_SHIP <= set(SHIPPED)


@pytest.mark.parametrize("bundle", SHIPPED)
def test_the_shipped_encoder_restores_into_the_bundles_network(bundle):
    card_file = REPO / "bundles" / bundle / "models" / "gcl_encoder.json"
    card = json.loads(card_file.read_text())
    assert all(card.get(field) not in (None, "") for field in CARD_FIELDS), card
    train = ConfigParser()
    train.read_config(str(REPO / "bundles" / bundle / "configs" / "train.json"))
    features = train.get_parsed_content("features")
    restored = restore_encoder(card_file, features=features, in_channels=train["network_def"]["in_channels"])
    torch.manual_seed(0)
    network = train.get_parsed_content("network_def")
    missing, unexpected = network.load_state_dict(restored, strict=False)
    assert not unexpected
    assert not [k for k in missing if k.startswith(ENCODER_PREFIXES)]  # every encoder weight comes from the file
    state = network.state_dict()
    assert all(torch.equal(state[k], v) for k, v in restored.items())
    assert all(v.dtype == torch.float32 for v in restored.values() if v.is_floating_point())
