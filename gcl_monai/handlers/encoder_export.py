"""Handler that writes the pre-trained encoder as a BasicUNet-compatible state dict."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from ignite.engine import Events

from gcl_monai.utils import atomic_write

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["EncoderExporter"]


class EncoderExporter:
    """
    Saves ``network.encoder_state_dict()`` (keys ``conv_0.*`` .. ``down_4.*``, as in
    :py:class:`monai.networks.nets.BasicUNet`) to ``output_path`` when the run completes (and, optionally, after
    every epoch), written atomically. A fine-tuning workflow loads it with
    ``monai.handlers.CheckpointLoader(load_path=output_path, load_dict={"model": unet}, strict=False)``.

    Args:
        network: a :py:class:`gcl_monai.networks.GCLNet`.
        output_path: file to write.
        every_epoch: also write after each epoch.
    """

    def __init__(self, network: torch.nn.Module, output_path: str | os.PathLike, every_epoch: bool = False) -> None:
        self.network = network
        self.output_path = Path(output_path)
        self.every_epoch = every_epoch

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.COMPLETED, self)
        if self.every_epoch:
            engine.add_event_handler(Events.EPOCH_COMPLETED, self)

    def __call__(self, engine: Engine | None = None) -> None:
        with atomic_write(self.output_path) as partial:
            torch.save(self.network.encoder_state_dict(), partial)
