"""Finding the checkpoint to resume from."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["latest_checkpoint"]


def latest_checkpoint(folder: str | os.PathLike, prefix: str = "checkpoint") -> str | None:
    """
    The most advanced checkpoint written by ``monai.handlers.CheckpointSaver`` in ``folder`` (the largest
    ``epoch=`` or ``iteration=`` number; a ``*_final_*`` checkpoint wins), or None when there is none, so a
    bundle can resume with ``"_disabled_": "$@resume_ckpt is None"``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    best, best_key = None, (-1, -1)
    for path in folder.glob(f"{prefix}*.pt"):
        match = re.search(r"(epoch|iteration)=(\d+)", path.name)
        key = (1, 0) if "final" in path.name else (0, int(match.group(2))) if match else (-1, -1)
        if key > best_key:
            best, best_key = str(path), key
    return best
