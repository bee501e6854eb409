"""The probe as an ignite handler of a pre-training: the encoder's probe Dice every N epochs."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from ignite.engine import Engine, Events

from gcl_monai.probe.data import load_probe_volumes
from gcl_monai.probe.evaluate import ProbeSettings, evaluate_encoder
from gcl_monai.probe.features import FrozenEncoder
from gcl_monai.utils import atomic_write

__all__ = ["ProbeHandler"]

logger = logging.getLogger("gcl_monai.probe")


class ProbeHandler:
    """
    Every ``interval`` epochs (and after the last one), the dense linear probe of the pre-training network's encoder
    (cross-validated over the labelled volumes of ``datalist``, :py:func:`gcl_monai.probe.evaluate_encoder`; loaded with
    ``transform`` at the first evaluation, so a disabled or never-due handler reads nothing): its mean Dice goes
    to ``engine.state.metrics["probe_dice"]`` (and ``probe_dice/<class>``), where MONAI's ``StatsHandler`` and
    ``TensorBoardStatsHandler`` log epoch metrics (attach this handler before them), and one line per evaluation to
    ``<output_dir>/probe_history.jsonl``. With ``keep_best``, the encoder of the best probe so far is written to
    ``<output_dir>/encoder_best_probe.pt`` (BasicUNet key names, like ``encoder.pt``).

    The probe draws no random number from torch's or numpy's global generators, so a run with the handler trains
    bit for bit as one without it.

    Args:
        network: the pre-training network (``GCLNet``: its ``encoder_state_dict()`` is probed).
        datalist: the labelled volumes' datalist entries (the bundle's training patients).
        transform: the bundle's evaluation transforms (``probe#transform``).
        features, norm: the encoder's BasicUNet ``features`` and ``norm``.
        num_classes, class_names: the segmentation classes (background included in ``num_classes``).
        interval: epochs between two evaluations (>= 1).
        output_dir: folder of ``probe_history.jsonl`` and the best encoder.
        settings: the probe's :py:class:`gcl_monai.probe.ProbeSettings`.
        keep_best: keep the encoder with the best probe Dice.
        groups: patient -> stratum of the folds (e.g. ACDC's pathology group).
    """

    def __init__(
        self,
        network: torch.nn.Module,
        datalist: Sequence[dict],
        transform: Callable,
        features: Sequence[int],
        norm: str | tuple,
        num_classes: int,
        class_names: Sequence[str],
        interval: int,
        output_dir: str | Path,
        settings: ProbeSettings | None = None,
        keep_best: bool = False,
        groups: dict[str, str] | None = None,
    ):
        if interval < 1:
            raise ValueError(f"interval must be >= 1 epoch, got {interval}.")
        self.network = network
        self.datalist, self.transform = list(datalist), transform
        self.volumes: list | None = None
        self.features, self.norm = list(features), norm
        self.num_classes, self.class_names = num_classes, list(class_names)
        self.interval = interval
        self.output_dir = Path(output_dir)
        self.settings = settings or ProbeSettings()
        self.keep_best = keep_best
        self.groups = groups
        self.best = float("-inf")

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.EPOCH_COMPLETED, self)

    def _due(self, engine: Engine) -> bool:
        epoch = engine.state.epoch
        return epoch % self.interval == 0 or epoch == engine.state.max_epochs

    def __call__(self, engine: Engine) -> None:
        if not self._due(engine):
            return
        if self.volumes is None:
            self.volumes = load_probe_volumes(self.datalist, self.transform)
        state = {k: v.detach().cpu() for k, v in self.network.encoder_state_dict().items()}
        with torch.random.fork_rng(devices=[]):
            encoder = FrozenEncoder(self.features, self.norm, self.settings.grid).load_encoder(state, "the network")
        result = evaluate_encoder(
            encoder, self.volumes, self.num_classes, self.class_names, settings=self.settings, groups=self.groups
        )
        engine.state.metrics["probe_dice"] = result["dice"]
        for name, value in result["dice_per_class"].items():
            engine.state.metrics[f"probe_dice/{name}"] = value
        self.output_dir.mkdir(parents=True, exist_ok=True)
        line = {
            "epoch": engine.state.epoch,
            "iteration": engine.state.iteration,
            **{k: result[k] for k in ("dice", "dice_per_class", "num_volumes", "seconds")},
        }
        with open(self.output_dir / "probe_history.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
        logger.info("Epoch %d: probe Dice %.4f (%.0f s).", engine.state.epoch, result["dice"], result["seconds"])
        if self.keep_best and result["dice"] > self.best:
            self.best = result["dice"]
            with atomic_write(self.output_dir / "encoder_best_probe.pt") as partial:
                torch.save(state, partial)
