"""Handler that makes every epoch's randomness a function of (seed, epoch), for bit-for-bit resumption."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ignite.engine import Events
from monai.data.utils import set_rnd
from monai.utils import set_determinism

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["EpochSeedHandler"]


class EpochSeedHandler:
    """
    At the start of each epoch, seeds Python, NumPy and torch with ``seed + epoch`` and re-seeds the random
    transforms of the data loader's dataset, before ignite creates the epoch's data iterator: without loader
    workers the dataset is re-seeded with ``set_rnd``; with workers, a dataset with a ``set_epoch_seed`` method
    (:py:class:`gcl_monai.data.SliceDataset`) gets ``seed + epoch`` there, so that each slice's views depend on the
    epoch and the slice only, whichever (persistent) worker draws them (other datasets' workers are seeded by the
    loader). An epoch then
    draws the same shuffling, augmentations and sub-sampling whether the run was interrupted or not, so a run
    resumed from an epoch-end checkpoint continues bit-for-bit (on CPU) like an uninterrupted one.

    Args:
        seed: base seed of the run.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.EPOCH_STARTED, self)

    def __call__(self, engine: Engine) -> None:
        epoch_seed = self.seed + engine.state.epoch
        set_determinism(seed=epoch_seed)
        loader = engine.data_loader
        dataset = getattr(loader, "dataset", None)
        if dataset is None:
            return
        if getattr(loader, "num_workers", 0) == 0:
            if hasattr(dataset, "set_epoch_seed"):
                dataset.set_epoch_seed(None)
            set_rnd(dataset, epoch_seed)
        elif hasattr(dataset, "set_epoch_seed"):
            dataset.set_epoch_seed(epoch_seed)
