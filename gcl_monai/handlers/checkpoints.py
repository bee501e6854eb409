"""Writing checkpoints that survive a killed run, and finding the one to resume from."""

from __future__ import annotations

import logging
import os
import re
import zipfile
from pathlib import Path

from ignite.handlers import DiskSaver
from monai.handlers import CheckpointSaver

__all__ = ["AtomicCheckpointSaver", "latest_checkpoint", "remove_checkpoints"]

logger = logging.getLogger(__name__)


class AtomicCheckpointSaver(CheckpointSaver):
    """
    :py:class:`monai.handlers.CheckpointSaver` whose checkpoints (interval, final and key-metric) are written
    atomically: to a temporary file in ``save_dir``, then renamed (ignite's ``DiskSaver(atomic=True)``).

    MONAI's saver writes in place (``atomic=False``), and ignite's ``Checkpoint`` removes the oldest kept file
    *before* writing the next one; a run killed while a checkpoint is being written therefore leaves a truncated
    file under the final name, which the resumed run (or an inference bundle) cannot load. With this saver a
    checkpoint file exists only once it is complete; with ``n_saved >= 2`` the previous one is still there while
    the next is written, so a kill at any moment loses at most one interval of work. A fixed file name
    (``final_filename``, ``key_metric_filename``, e.g. the best ``model.pt``) is replaced by the rename, never
    removed first, so it always holds the last complete checkpoint. The arguments are those of
    :py:class:`monai.handlers.CheckpointSaver`.

    ``adopt_existing``: the interval checkpoints already in ``save_dir`` (``checkpoint_epoch=<n>.pt``, or
    ``iteration=``; those of the run this one resumes) count among the ``n_saved`` kept, so that a resumed run
    removes them in turn instead of leaving them behind; without it each resumption would keep its starting
    checkpoint for good.

    With ``save_key_metric``, :py:meth:`state_dict` gives the key-metric tracking list (the best score kept so
    far and its file), which MONAI's ``load_state_dict`` restores: a trainer's checkpoint that holds the
    validator's saver resumes without replacing the best model by a worse one.
    """

    def __init__(self, save_dir: str, *args, adopt_existing: bool = False, **kwargs) -> None:
        super().__init__(save_dir, *args, **kwargs)
        for checkpoint in (self._interval_checkpoint, self._final_checkpoint, self._key_metric_checkpoint):
            if checkpoint is not None:
                checkpoint.save_handler = _AtomicDiskSaver(save_dir, checkpoint.save_handler.filename)
        if adopt_existing and self._interval_checkpoint is not None:
            unit = "epoch" if self.epoch_level else "iteration"
            existing = sorted(_numbered(Path(save_dir), "checkpoint", unit))
            self._interval_checkpoint.load_state_dict({"_saved": [(step, path.name) for step, path in existing]})

    def state_dict(self) -> dict:
        """The key-metric tracking list (ignite's ``Checkpoint.state_dict``), the counterpart of
        :py:meth:`monai.handlers.CheckpointSaver.load_state_dict`.

        Raises:
            ValueError: the saver keeps no key-metric checkpoint, so it has no state to save.
        """
        if self._key_metric_checkpoint is None:
            raise ValueError("AtomicCheckpointSaver.state_dict: only a saver with save_key_metric=True has a state.")
        return self._key_metric_checkpoint.state_dict()


class _AtomicDiskSaver(DiskSaver):
    """ignite's atomic ``DiskSaver``; with ``filename``, every checkpoint goes to that name, replacing the last."""

    def __init__(self, dirname: str, filename: str | None = None) -> None:
        super().__init__(dirname=dirname, require_empty=False, atomic=True)
        self.filename = filename

    def __call__(self, checkpoint, filename: str, metadata=None) -> None:
        super().__call__(checkpoint, self.filename or filename, metadata)

    def remove(self, filename: str) -> None:
        if self.filename is None:  # a fixed name is replaced by the next write instead
            super().remove(filename)


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
    ranked = [((1, 0), str(path)) for path in folder.glob(f"{prefix}*final*.pt")]
    ranked += [((0, step), str(path)) for step, path in _numbered(folder, prefix, "epoch|iteration")]
    for _, path in sorted(ranked, reverse=True):
        if zipfile.is_zipfile(path):
            return path
        logger.warning("Skipping incomplete checkpoint %s (not a complete torch.save archive).", path)
    return None


def remove_checkpoints(folder: str | os.PathLike, prefix: str = "checkpoint") -> list[str]:
    """
    Removes the resumption checkpoints (``prefix*.pt``) an earlier run left in ``folder``, with a warning naming
    them, and returns their paths: a run that starts afresh in a used folder must not leave an earlier run's more
    advanced checkpoint for :py:func:`latest_checkpoint` to resume later. Other files (the kept ``model.pt``) stay.
    """
    removed = sorted(str(path) for path in Path(folder).glob(f"{prefix}*.pt")) if Path(folder).is_dir() else []
    for path in removed:
        Path(path).unlink()
    if removed:
        logger.warning("Starting afresh (resume is off): removed the earlier run's checkpoints %s.", removed)
    return removed


def _numbered(folder: Path, prefix: str, unit: str) -> list[tuple[int, Path]]:
    """(n, path) of the checkpoints ``<prefix>*<unit>=<n>.pt`` in ``folder`` (``unit``: a regular expression)."""
    found = [(re.search(rf"(?:{unit})=(\d+)\.pt$", path.name), path) for path in folder.glob(f"{prefix}*.pt")]
    return [(int(match.group(1)), path) for match, path in found if match and "final" not in path.name]
