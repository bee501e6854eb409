"""The keep command (``python -m gcl_monai.networks.keep``): the card's fields, the run's last probe beside the encoder,
bad fields refused by name."""

import json

import pytest
import torch

from gcl_monai.networks import restore_encoder
from tests.networks.network_helpers import FEATURES


def test_keep_command_writes_a_card_with_the_runs_last_probe(encoder_pt, tmp_path, capsys):
    from gcl_monai.networks.keep import main

    (encoder_pt.parent / "probe_history.jsonl").write_text(
        '{"epoch": 1, "dice": 0.31}\n{"epoch": 2, "dice": 0.42, "seconds": 3.0}\n'
    )
    out = tmp_path / "models" / "gcl_encoder.pt"
    assert main([str(encoder_pt), str(out), "--field", "recipe=gcl", "--field", "seed=3", "--field", "terms=a b"]) == 0
    card = json.loads(out.with_suffix(".json").read_text())
    assert json.loads(capsys.readouterr().out) == card
    assert (card["recipe"], card["seed"], card["terms"]) == ("gcl", 3, "a b")
    assert (card["probe_dice"], card["probe_epoch"]) == (0.42, 2)
    assert restore_encoder(out.with_suffix(".json"), features=FEATURES).keys() == torch.load(encoder_pt).keys()


@pytest.mark.parametrize(
    "fields, message",
    [(["seed=1", "seed=2"], "'seed' is given twice"), (["seed"], "is not KEY=VALUE"), (["sha256=x"], "sha256")],
)
def test_keep_command_refuses_bad_fields_by_name(encoder_pt, tmp_path, capsys, fields, message):
    from gcl_monai.networks.keep import main

    argv = [str(encoder_pt), str(tmp_path / "e.pt")] + [a for f in fields for a in ("--field", f)]
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def test_last_probe_and_card_fields_by_hand(tmp_path):
    """The last non-blank line of the run's probe history, {} without one; the given fields parsed as JSON where they
    parse (numbers, lists), as text otherwise, and taking precedence over the probe's."""
    from gcl_monai.networks.keep import card_fields, last_probe

    assert last_probe(tmp_path) == {}
    (tmp_path / "probe_history.jsonl").write_text("\n")
    assert last_probe(tmp_path) == {}
    (tmp_path / "probe_history.jsonl").write_text('{"epoch": 4, "dice": 0.3}\n{"epoch": 8, "dice": 0.5}\n\n')
    assert last_probe(tmp_path) == {"probe_dice": 0.5, "probe_epoch": 8}
    encoder = tmp_path / "encoder.pt"  # the card reads the folder beside it, not the file
    fields = card_fields(encoder, ["grid=[1, 2]", "seed=07x", "note=a=b", "probe_epoch=9", "empty="])
    assert fields == {"probe_dice": 0.5, "probe_epoch": 9, "grid": [1, 2], "seed": "07x", "note": "a=b", "empty": ""}
    with pytest.raises(ValueError, match="is not KEY=VALUE"):
        card_fields(encoder, ["=3"])
