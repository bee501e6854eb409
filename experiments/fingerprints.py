"""
The fingerprint of a pre-training's encoder (the SHA-256 of ``encoder.pt``), recorded in its status: what a
fine-tuning cell taken from another experiment is matched on (:py:mod:`experiments.reuse`), and the reference that
an encoder the same cell makes again must equal, byte for byte, when its weights were lost and its status kept.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from experiments.experiment import PretrainCell
from experiments.status import read_status, write_status

__all__ = ["ENCODER_HASH_KEY", "OTHER_BYTES_HASH_KEY", "encoder_hash", "made_encoder", "record_encoder_hash"]

#: the status key of a finished pre-training's encoder fingerprint (:py:func:`encoder_hash`)
ENCODER_HASH_KEY = "encoder_sha256"
#: the status key, beside a failed pre-training's first fingerprint, of the encoder it made again with other bytes
#: (the key's name is the one older status files hold)
OTHER_BYTES_HASH_KEY = "remade_sha256"


def encoder_hash(path: Path) -> str:
    """The SHA-256 of an encoder file's bytes (``torch.save`` of the same tensors writes the same bytes)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def record_encoder_hash(cell: PretrainCell) -> None:
    """Adds the encoder's fingerprint to the status of a finished pre-training that ran before it was recorded."""
    status = read_status(cell.folder)
    encoder = cell.folder / "encoder.pt"
    if status.get("status") == "finished" and ENCODER_HASH_KEY not in status and encoder.exists():
        write_status(cell.folder, {**status, ENCODER_HASH_KEY: encoder_hash(encoder)})


def made_encoder(encoder: Path, recorded: str | None) -> tuple[dict[str, str], str]:
    """
    The fingerprint keys of a pre-training's status once it made ``encoder``, and why the pre-training fails ("" when
    it does not).

    Args:
        encoder: the ``encoder.pt`` it made.
        recorded: the fingerprint its status kept of an encoder it made before (None: its first).

    Returns:
        ``{ENCODER_HASH_KEY: the reference}``: ``encoder``'s fingerprint, or ``recorded`` when there is one; where
        ``encoder`` has other bytes than ``recorded``, also ``{OTHER_BYTES_HASH_KEY: its fingerprint}``, and the
        reason: the fine-tuning cells that loaded the first encoder would mix with those loading this one.
    """
    made = encoder_hash(encoder)
    if recorded is None or made == recorded:
        return {ENCODER_HASH_KEY: made}, ""
    reason = (
        f"{encoder} was made again and differs from the encoder this cell made before (sha256 {made}, recorded "
        f"{recorded}): the fine-tuning cells that loaded the first one would mix with cells loading this one. Run the "
        "pre-training on the machine and thread count it first ran with, or rerun with --set-aside-stale-cells to "
        "take this encoder and run those cells again (the first ones moved to the experiment's discarded/)."
    )
    return {ENCODER_HASH_KEY: recorded, OTHER_BYTES_HASH_KEY: made}, reason
