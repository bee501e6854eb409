"""Whether a cell is done, read from what its run left in its folder: a rerun skips a done cell."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from experiments.experiment import FinetuneCell, PretrainCell
from experiments.status import read_status

__all__ = ["finetune_done", "pretrain_done", "trained"]


def pretrain_done(cell: PretrainCell) -> bool:
    """Finished with the requested number of epochs, or collapsed (a collapse is final: delete the folder to retry)."""
    status = read_status(cell.folder)
    if status.get("status") == "collapsed":
        return True
    return (
        status.get("status") == "finished"
        and status.get("epochs") == cell.config_value("epochs")
        and (cell.folder / "encoder.pt").exists()
    )


def finetune_done(cell: FinetuneCell) -> bool:
    """Evaluated on every test set (a ``dice.json`` each)."""
    return all(cell.dice_file(test_set).exists() for test_set in cell.eval_overrides)


def trained(status: Mapping[str, Any]) -> bool:
    """Whether a fine-tuning cell's status says its training finished (a rerun then only evaluates it)."""
    return bool(status.get("trained") or status.get("status") == "finished")
