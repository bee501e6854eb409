"""
Keeping a pre-trained encoder beside the results it produced: the weights in bfloat16 with a card (recipe, seed,
commit, probe Dice, the architecture read off the weights, a checksum), and restoring them in float32 for a network
whose architecture matches, refusing a mismatch by name.

bfloat16 halves the file (an encoder of ``BasicUNet`` features (16, 32, 64, 128, 256) is 1.9 MB in float32) and
keeps float32's exponent range; its 8-bit mantissa rounds each weight by at most 2^-9 of its magnitude, below the
noise of a fine-tuning step (the first Adam update at 1e-3 moves a weight by about 1e-3).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from gcl_monai.networks.gcl_net import ENCODER_PREFIXES
from gcl_monai.utils import atomic_write

__all__ = ["CARD_VERSION", "CARD_KEYS", "encoder_architecture", "keep_encoder", "restore_encoder", "pretrained_encoder"]

CARD_VERSION = 1
#: the card's entries that :func:`keep_encoder` writes itself
CARD_KEYS = ("card_version", "architecture", "stored_dtype", "sha256", "weights")


def encoder_architecture(state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """The encoder's ``in_channels`` and the output channels of ``conv_0``, ``down_1`` .. ``down_4`` (the first five
    of ``BasicUNet``'s ``features``), read off the weights of a ``BasicUNet``-keyed state dict."""
    keys = {p.rstrip("."): (f"{p}conv_1.conv.weight", f"{p}convs.conv_1.conv.weight") for p in ENCODER_PREFIXES}
    weights = {p: state.get(plain, state.get(down)) for p, (plain, down) in keys.items()}
    missing = [p for p, w in weights.items() if w is None]
    if missing:
        raise ValueError(f"not a BasicUNet encoder state dict: no second convolution weight for {missing}.")
    first = state.get("conv_0.conv_0.conv.weight")
    return {
        "spatial_dims": weights["conv_0"].ndim - 2,
        "in_channels": int(first.shape[1]) if first is not None else None,
        "features": [int(w.shape[0]) for w in weights.values()],
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def keep_encoder(encoder: str | os.PathLike, out: str | os.PathLike, **card: Any) -> dict[str, Any]:
    """
    Writes the float32 encoder state dict of ``encoder`` (an ``encoder.pt``) to ``out`` in bfloat16, and its card to
    ``out`` with the suffix ``.json``: ``card``'s entries (recipe, seed, commit, probe Dice, dataset, terms: whatever
    the caller records) with the architecture, the stored dtype and the file's SHA-256 added. Returns the card.

    Raises:
        ValueError: ``card`` names one of :data:`CARD_KEYS`.
    """
    taken = sorted(set(card) & set(CARD_KEYS))
    if taken:
        raise ValueError(f"card entries {taken} are written by keep_encoder itself.")
    state = torch.load(encoder, map_location="cpu", weights_only=True)
    out = Path(out)
    with atomic_write(out) as partial:
        torch.save({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()}, partial)
    card = {
        **card,
        "card_version": CARD_VERSION,
        "architecture": encoder_architecture(state),
        "stored_dtype": "bfloat16",
        "sha256": _sha256(out),
        "weights": out.name,
    }
    with atomic_write(out.with_suffix(".json")) as partial:
        partial.write_text(json.dumps(card, indent=1) + "\n")
    return card


def restore_encoder(
    card_file: str | os.PathLike, features: Sequence[int] | None = None, in_channels: int | None = None
) -> dict[str, torch.Tensor]:
    """
    The float32 state dict of a kept encoder, from its card (``<name>.json``, the weights beside it). Refuses, with
    the card's path and the field's name: a card of another version, weights whose checksum differs from the
    card's, and an architecture other than the network's (``features``: the network's, the first five compared;
    ``in_channels``).
    """
    card_file = Path(card_file)
    card = json.loads(card_file.read_text())
    if card.get("card_version") != CARD_VERSION:
        raise ValueError(f"{card_file}: card_version {card.get('card_version')!r}, this code reads {CARD_VERSION}.")
    weights = card_file.parent / card["weights"]
    if _sha256(weights) != card["sha256"]:
        raise ValueError(f"{card_file}: sha256 of {weights.name} differs from the card's: the weights changed.")
    arch = card["architecture"]
    if features is not None and list(features)[: len(arch["features"])] != arch["features"]:
        raise ValueError(
            f"{card_file}: features {arch['features']} of the encoder, but the network has {list(features)[:5]}."
        )
    if in_channels is not None and arch["in_channels"] is not None and in_channels != arch["in_channels"]:
        raise ValueError(
            f"{card_file}: in_channels {arch['in_channels']} of the encoder, but the network has {in_channels}."
        )
    state = torch.load(weights, map_location="cpu", weights_only=True)
    return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def pretrained_encoder(
    path: str | os.PathLike, features: Sequence[int], work_dir: str | os.PathLike, in_channels: int = 1
) -> str:
    """
    The encoder file a fine-tuning run loads: ``path`` as it is for an ``encoder.pt``; for a kept encoder's card
    (``.json``), the restored float32 weights written to ``work_dir/<card name>.pt`` (checked against ``features``
    and ``in_channels`` by :func:`restore_encoder`).
    """
    path = Path(path)
    if path.suffix != ".json":
        return str(path)
    out = Path(work_dir) / f"{path.stem}.pt"
    with atomic_write(out) as partial:
        torch.save(restore_encoder(path, features, in_channels), partial)
    return str(out)
