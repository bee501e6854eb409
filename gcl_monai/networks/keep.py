"""
Keeps a pre-training run's encoder for sharing or shipping with a bundle::

    python -m gcl_monai.networks.keep outputs/pretrain/gcl/encoder.pt models/gcl_encoder.pt \
        --field recipe=gcl --field seed=0 --field dataset=acdc --field terms="ACDC: research use"

writes ``models/gcl_encoder.pt`` (bfloat16) and its card ``models/gcl_encoder.json``
(:func:`gcl_monai.networks.keep_encoder`). The card takes every ``--field`` (a value that parses as JSON is stored
as such: numbers, lists) and, when the run's ``probe_history.jsonl`` lies beside the encoder, its last probe Dice
and epoch (``probe_dice``, ``probe_epoch``); a field named twice is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gcl_monai.networks.encoder_card import keep_encoder

__all__ = ["last_probe", "card_fields", "main"]


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def last_probe(folder: Path) -> dict[str, Any]:
    """A pre-training folder's last probe (its ``probe_history.jsonl``) as ``probe_dice`` and ``probe_epoch``; {}
    without one."""
    history = folder / "probe_history.jsonl"
    lines = [line for line in history.read_text().splitlines() if line.strip()] if history.is_file() else []
    if not lines:
        return {}
    last = json.loads(lines[-1])
    return {"probe_dice": last.get("dice"), "probe_epoch": last.get("epoch")}


def card_fields(encoder: Path, fields: list[str]) -> dict[str, Any]:
    """The card's entries: the last probe beside ``encoder`` (:func:`last_probe`) and ``fields`` (``KEY=VALUE``),
    which may not name a key twice."""
    card = last_probe(encoder.parent)
    given: dict[str, Any] = {}
    for field in fields:
        key, sep, text = field.partition("=")
        if not sep or not key:
            raise ValueError(f"--field {field!r} is not KEY=VALUE.")
        if key in given:
            raise ValueError(f"--field {key!r} is given twice.")
        given[key] = _value(text)
    return {**card, **given}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gcl_monai.networks.keep", description=__doc__.split("::")[0])
    parser.add_argument("encoder", type=Path, help="the pre-training run's float32 encoder.pt")
    parser.add_argument("out", type=Path, help="the kept weights (.pt); the card is written beside with .json")
    parser.add_argument("--field", action="append", default=[], metavar="KEY=VALUE", help="an entry of the card")
    args = parser.parse_args(argv)
    if args.out.suffix != ".pt":
        parser.error(f"out must end in .pt, got {args.out}")
    if not args.encoder.is_file():
        parser.error(f"no encoder file {args.encoder}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        card = keep_encoder(args.encoder, args.out, **card_fields(args.encoder, args.field))
    except ValueError as err:
        parser.error(str(err))
    print(json.dumps(card, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
