"""
A pre-training made again with other bytes than its first encoder, and the fine-tuning cells that trained with the
first one.

On a new machine an experiment goes on from its kept records (:py:mod:`~experiments.gpu_session.records`); a
pre-training whose encoder stayed behind is made again when a cell still loads it. Fine-tuning and pre-training are
not bit-reproducible across machines (docs/results/protocol_acdc/stageB-L2-rerun), so the new encoder may differ. By
default that pre-training then fails (:py:func:`experiments.fingerprints.made_encoder`): its finished cells used
the first encoder, the ones left would use the second, and no row may mix two encoders. With
``--set-aside-stale-cells`` the runner instead takes the new encoder and moves every cell of the first one to
``<experiment>/discarded/`` (kept to read, never run on or reported), so that they run again with the new one.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from experiments.experiment import FinetuneCell, PretrainCell
from experiments.fingerprints import ENCODER_HASH_KEY, OTHER_BYTES_HASH_KEY, encoder_hash
from experiments.status import read_status, write_status

__all__ = ["DISCARDED", "REPLACED_HASH_KEY", "loads", "replace_encoder", "set_aside"]

logger = logging.getLogger("experiments")

#: the folder of an experiment that holds the cells set aside
DISCARDED = "discarded"
#: the status key, once the new encoder was taken, of the first encoder's fingerprint
REPLACED_HASH_KEY = "replaced_sha256"


def set_aside(folder: Path) -> Path | None:
    """
    Moves a cell's folder (``<experiment>/<pretrain|finetune>/<name>``) to
    ``<experiment>/discarded/<pretrain|finetune>_<name>``, numbered ``.1``, ``.2``, ... when that name is taken.

    Returns:
        where it went; None when ``folder`` does not exist (set aside already).
    """
    folder = Path(folder)
    if not folder.exists():
        return None
    name = f"{folder.parent.name}_{folder.name}"
    discarded = folder.parents[1] / DISCARDED
    target, number = discarded / name, 0
    while target.exists():
        number += 1
        target = discarded / f"{name}.{number}"
    discarded.mkdir(parents=True, exist_ok=True)
    shutil.move(str(folder), target)
    return target


def loads(cell: PretrainCell | FinetuneCell, pretraining: PretrainCell) -> bool:
    """Whether ``cell`` is a fine-tuning cell that loads the encoder of ``pretraining``."""
    return isinstance(cell, FinetuneCell) and cell.pretrain is not None and cell.pretrain.folder == pretraining.folder


def replace_encoder(pretraining: PretrainCell, cells: Sequence[PretrainCell | FinetuneCell]) -> list[Path]:
    """
    Takes the encoder that ``pretraining`` made again with other bytes (its status ``failed`` with
    :py:data:`~experiments.fingerprints.OTHER_BYTES_HASH_KEY`): those of ``cells`` that load its encoder are set aside,
    the status becomes ``finished`` with the new fingerprint, and the first one is kept as
    :py:data:`REPLACED_HASH_KEY`.

    Returns:
        the folders the cells were moved to.

    Raises:
        ValueError: when the status records no encoder made again, or ``encoder.pt`` is not the encoder it records.
    """
    status = read_status(pretraining.folder)
    made, encoder = status.get(OTHER_BYTES_HASH_KEY), pretraining.folder / "encoder.pt"
    if status.get("status") != "failed" or made is None:
        raise ValueError(f"{pretraining.folder}: no encoder made again with other bytes is recorded.")
    if not encoder.exists() or encoder_hash(encoder) != made:
        raise ValueError(f"{encoder} is not the encoder made again (sha256 {made}): run the pre-training again.")
    stale = [cell for cell in cells if loads(cell, pretraining)]
    moved = [target for cell in stale if (target := set_aside(cell.folder)) is not None]
    kept = {k: v for k, v in status.items() if k not in (OTHER_BYTES_HASH_KEY, "message")}
    write_status(
        pretraining.folder,
        {**kept, "status": "finished", ENCODER_HASH_KEY: made, REPLACED_HASH_KEY: status.get(ENCODER_HASH_KEY)},
    )
    logger.warning(
        "%s: its encoder made again differs from the first (sha256 %s, was %s); the new one is taken and the cells "
        "of the first set aside in %s: %s.",
        pretraining.folder,
        made,
        status.get(ENCODER_HASH_KEY),
        pretraining.folder.parents[1] / DISCARDED,
        ", ".join(p.name for p in moved) or "none",
    )
    return moved
