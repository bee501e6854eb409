"""Shrink-and-perturb of a pre-trained encoder at the start of fine-tuning."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
from ignite.engine import Events

from gcl_monai.networks import ENCODER_PREFIXES

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["ShrinkPerturb"]

logger = logging.getLogger(__name__)


class ShrinkPerturb:
    """
    Shrink and perturb (Ash & Adams, "On Warm-Starting Neural Network Training", NeurIPS 2020) the convolution
    weights of a loaded encoder before fine-tuning: every weight :math:`w` of a convolution whose name starts with
    one of ``prefixes`` becomes

    .. math:: w \\leftarrow \\lambda\\, w + p\\, w_0,

    :math:`\\lambda` = ``shrink``, :math:`p` = ``perturb`` and :math:`w_0` a fresh draw of the layer's own
    initialisation (its ``reset_parameters``, from a generator seeded with ``seed``, so every rank of a distributed
    run draws the same). Biases and normalisation parameters keep their loaded values. With a normalisation after
    every convolution (the bundles' ``norm``) the scale of a weight does not change the network's function, so
    what matters is the ratio of the loaded to the fresh part.

    Attach it after the handler that loads the encoder (``monai.handlers.CheckpointLoader``): both act on
    ``Events.STARTED``, in the order they were attached.

    Args:
        network: the network being fine-tuned (``DataParallel`` / ``DistributedDataParallel`` are unwrapped).
        shrink: factor :math:`\\lambda` of the loaded weights.
        perturb: factor :math:`p` of the fresh initialisation.
        prefixes: names (prefixes) of the modules to change; the default is BasicUNet's encoder
            (:py:data:`gcl_monai.networks.ENCODER_PREFIXES`).
        seed: seed of the fresh initialisation.

    Raises:
        ValueError: a negative factor, both factors 0, or no convolution matching ``prefixes``.
    """

    def __init__(
        self,
        network: nn.Module,
        shrink: float,
        perturb: float,
        prefixes: Sequence[str] = ENCODER_PREFIXES,
        seed: int = 0,
    ) -> None:
        if shrink < 0 or perturb < 0 or shrink == perturb == 0:
            raise ValueError(f"shrink and perturb must be >= 0 and not both 0, got shrink={shrink}, perturb={perturb}.")
        if isinstance(network, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            network = network.module
        self.convolutions = [
            module
            for name, module in network.named_modules()
            if isinstance(module, nn.modules.conv._ConvNd) and (name + ".").startswith(tuple(prefixes))
        ]
        if not self.convolutions:
            raise ValueError(f"no convolution of the network is under the prefixes {tuple(prefixes)}.")
        self.shrink = float(shrink)
        self.perturb = float(perturb)
        self.seed = seed

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.STARTED, self)

    def __call__(self, engine: Engine | None = None) -> None:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(self.seed)
            for conv in self.convolutions:
                fresh = copy.deepcopy(conv).to("cpu")
                fresh.reset_parameters()
                conv.weight.mul_(self.shrink).add_(fresh.weight.to(conv.weight), alpha=self.perturb)
        logger.info(
            "ShrinkPerturb: %d encoder convolution weights <- %g * loaded + %g * fresh initialisation (seed %d).",
            len(self.convolutions),
            self.shrink,
            self.perturb,
            self.seed,
        )
