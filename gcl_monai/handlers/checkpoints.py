"""Writing checkpoints that survive a killed run, and finding the one to resume from."""

from __future__ import annotations

import logging
import os
import re
import zipfile
from pathlib import Path

from ignite.handlers import DiskSaver
from monai.handlers import CheckpointSaver

__all__ = ["AtomicCheckpointSaver", "latest_checkpoint"]

logger = logging.getLogger(__name__)


class AtomicCheckpointSaver(CheckpointSaver):
    """
    :py:class:`monai.handlers.CheckpointSaver` whose epoch/iteration-interval and final checkpoints are written
    atomically: to a temporary file in ``save_dir``, then renamed (ignite's ``DiskSaver(atomic=True)``).

    MONAI's saver writes in place (``atomic=False``), and ignite's ``Checkpoint`` removes the oldest kept file
    *before* writing the next one; a run killed while a checkpoint is being written therefore leaves a truncated
    file under the final name, which the resumed run cannot load. With this saver a checkpoint file exists only
    once it is complete; with ``n_saved >= 2`` the previous one is still there while the next is written, so a
    kill at any moment loses at most one interval of work. The key-metric checkpoint (fixed ``key_metric_filename``
    support) keeps MONAI's own writer. The arguments are those of :py:class:`monai.handlers.CheckpointSaver`.
    """

    def __init__(self, save_dir: str, *args, **kwargs) -> None:
        super().__init__(save_dir, *args, **kwargs)
        for checkpoint in (self._interval_checkpoint, self._final_checkpoint):
            if checkpoint is not None and checkpoint.save_handler.filename is None:
                checkpoint.save_handler = DiskSaver(dirname=save_dir, require_empty=False, atomic=True)


def latest_checkpoint(folder: str | os.PathLike, prefix: str = "checkpoint") -> str | None:
    """
    The most advanced complete checkpoint written by a ``CheckpointSaver`` in ``folder`` (the largest
    ``epoch=`` or ``iteration=`` number; a ``*_final_*`` checkpoint wins), or None when there is none, so a
    bundle can resume with ``"_disabled_": "$@resume_ckpt is None"``.

    A file that is not a complete ``torch.save`` archive (e.g. truncated by a run killed while writing it
    in place) is skipped with a warning naming it, and the next most advanced one is used.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return None
    ranked = []
    for path in folder.glob(f"{prefix}*.pt"):
        match = re.search(r"(epoch|iteration)=(\d+)", path.name)
        key = (1, 0) if "final" in path.name else (0, int(match.group(2))) if match else (-1, -1)
        ranked.append((key, str(path)))
    for _, path in sorted(ranked, reverse=True):
        if zipfile.is_zipfile(path):
            return path
        logger.warning("Skipping incomplete checkpoint %s (not a complete torch.save archive).", path)
    return None
