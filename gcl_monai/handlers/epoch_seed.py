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
    transforms of the data loader's dataset, before ignite creates the epoch's data iterator. An epoch then
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
        if getattr(loader, "num_workers", 0) == 0 and getattr(loader, "dataset", None) is not None:
            set_rnd(loader.dataset, epoch_seed)
