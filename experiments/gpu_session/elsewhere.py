"""
The cells of an experiment whose weights stayed on another machine, and what the runner does with them: the checks
(:py:data:`experiments.runner.CellCheck`) of a run that goes on from records kept on another machine
(:py:mod:`~experiments.gpu_session.records`).

- a pre-training whose encoder is not here (:py:func:`encoder_elsewhere`) is made again only when a cell still to
  train loads it, or when asked (``remake_encoders``); when no cell trained with the first encoder, its fingerprint
  is dropped and the new encoder is the reference;
- a pre-training made again with other bytes fails (:py:func:`experiments.fingerprints.made_encoder`); when asked
  (``set_aside_stale_cells``), its new encoder is taken and the first encoder's cells are set aside to run again
  (:py:mod:`~experiments.gpu_session.remade`);
- a fine-tuning cell trained elsewhere cannot be evaluated on a test set added since (:py:func:`model_elsewhere`):
  it is not run, and its status says why (the ``message`` of its failed rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from experiments.done import finetune_done, trained
from experiments.experiment import FinetuneCell, PretrainCell
from experiments.fingerprints import ENCODER_HASH_KEY, OTHER_BYTES_HASH_KEY
from experiments.gpu_session.remade import loads, replace_encoder
from experiments.runner import CellCheck
from experiments.status import read_status, write_status

__all__ = ["MODEL_ELSEWHERE", "cell_checks", "encoder_elsewhere", "model_elsewhere"]

Cell = PretrainCell | FinetuneCell

#: why a test set added after a cell's training on another machine has no Dice (:py:func:`model_elsewhere`)
MODEL_ELSEWHERE = "not evaluated: its model is not on this machine (a model stays where it was trained)"


def encoder_elsewhere(cell: PretrainCell) -> bool:
    """
    Whether the pre-training finished, with its encoder's fingerprint recorded, but its ``encoder.pt`` is not here
    (its records kept and restored on another machine).
    """
    status = read_status(cell.folder)
    return (
        status.get("status") == "finished" and ENCODER_HASH_KEY in status and not (cell.folder / "encoder.pt").exists()
    )


def model_elsewhere(cell: FinetuneCell) -> bool:
    """Whether ``cell`` finished training and its model is not here (its records restored from the machine that
    trained it, where the model stayed): an evaluation it has not had (a test set added since) cannot run here."""
    return trained(read_status(cell.folder)) and not (Path(cell.train_overrides["ckpt_dir"]) / "model.pt").exists()


def _take_other_bytes(cell: Cell, cells: Sequence[FinetuneCell]) -> tuple[str, bool] | None:
    """A pre-training that failed for making its encoder again with other bytes: the new encoder is taken."""
    status = read_status(cell.folder) if isinstance(cell, PretrainCell) else {}
    if not (status.get("status") == "failed" and OTHER_BYTES_HASH_KEY in status):
        return None
    moved = replace_encoder(cell, cells)
    names = ", ".join(p.name for p in moved) or "none"
    return f"made again with other bytes: the new encoder taken; set aside: {names}", False


def _encoder_check(remake_encoders: bool) -> CellCheck:
    """A pre-training whose encoder is not here: not made again unless a cell still to train loads it (or asked)."""

    def check(cell: Cell, cells: Sequence[FinetuneCell]) -> tuple[str, bool] | None:
        if not (isinstance(cell, PretrainCell) and encoder_elsewhere(cell)):
            return None
        trained_loading = [trained(read_status(c.folder)) for c in cells if loads(c, cell)]
        if not remake_encoders and all(trained_loading):
            message = "finished on another machine, its encoder not here; no cell left to train loads it"
            return f"{message}: not made again (--remake-encoders makes it)", False
        if not any(trained_loading):
            status = read_status(cell.folder)
            write_status(cell.folder, {k: v for k, v in status.items() if k != ENCODER_HASH_KEY})
            return "its encoder stayed on another machine and no cell trained with it: new", True
        return None

    return check


def _model_check(cell: Cell, cells: Sequence[FinetuneCell]) -> tuple[str, bool] | None:
    """A fine-tuning cell trained elsewhere with a test set left: not run; its status says why."""
    if not isinstance(cell, FinetuneCell) or finetune_done(cell) or not model_elsewhere(cell):
        return None
    status = read_status(cell.folder)
    if status.get("message") != MODEL_ELSEWHERE:
        write_status(cell.folder, {**status, "message": MODEL_ELSEWHERE})
    left = ", ".join(t for t in cell.eval_overrides if not cell.dice_file(t).exists())
    return f"{left}: {MODEL_ELSEWHERE}", False


def cell_checks(remake_encoders: bool = False, set_aside_stale_cells: bool = False) -> list[CellCheck]:
    """
    The runner's checks of a run whose records may come from another machine (see the module's description).

    Args:
        remake_encoders: make again the encoder of a finished pre-training whose weights are not here even when no
            fine-tuning cell left needs it (e.g. to probe it).
        set_aside_stale_cells: take an encoder made again with other bytes and set aside the cells of the first.
    """
    return [*([_take_other_bytes] if set_aside_stale_cells else []), _encoder_check(remake_encoders), _model_check]
