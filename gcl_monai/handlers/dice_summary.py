"""Handler that summarises per-volume, per-class Dice of an evaluation run into a JSON file and the log."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from ignite.engine import Events

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["DiceSummary"]

logger = logging.getLogger("gcl_monai.handlers")


class DiceSummary:
    """
    At the end of an evaluation, reads the per-volume, per-class details of a Dice metric (``MeanDice`` with
    ``save_details=True``, found in ``engine.state.metric_details[metric_name]``), and writes
    ``{"dice": mean over volumes of the mean over classes, "dice_per_class": {...}, "num_volumes": n,
    "per_volume": [...]}`` to ``output_file``, and logs it. NaN entries (a class absent from both prediction and
    ground truth) are ignored in the means.

    Args:
        metric_name: name of the metric in the evaluator.
        class_names: names of the foreground classes, in channel order.
        output_file: JSON file to write.
        filename_key: meta key with the volume's file name, for ``per_volume``.
    """

    def __init__(
        self,
        metric_name: str,
        class_names: Sequence[str],
        output_file: str | os.PathLike,
        filename_key: str = "filename_or_obj",
    ) -> None:
        self.metric_name = metric_name
        self.class_names = list(class_names)
        self.output_file = Path(output_file)
        self.filename_key = filename_key
        self._files: list[str] = []

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.EPOCH_STARTED, lambda e: self._files.clear())
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._record_files)
        engine.add_event_handler(Events.EPOCH_COMPLETED, self)

    def _record_files(self, engine: Engine) -> None:
        batch = engine.state.batch  # a list of dicts once decollated, else a collated dict
        items = batch if isinstance(batch, list) else [batch]
        for item in items:
            names = getattr(item["image"], "meta", {}).get(self.filename_key, "?")
            self._files.extend(str(n) for n in (names if isinstance(names, (list, tuple)) else [names]))

    def __call__(self, engine: Engine) -> None:
        details = torch.as_tensor(engine.state.metric_details[self.metric_name]).float()  # (volumes, classes)
        if details.shape[1] != len(self.class_names):
            raise ValueError(
                f"Dice details have {details.shape[1]} classes but class_names has {len(self.class_names)}."
            )
        per_volume = details.nanmean(dim=1)
        summary = {
            "dice": float(per_volume.nanmean()),
            "dice_std_over_volumes": float(per_volume[~per_volume.isnan()].std()) if len(per_volume) > 1 else 0.0,
            "dice_per_class": {n: float(details[:, i].nanmean()) for i, n in enumerate(self.class_names)},
            "num_volumes": int(details.shape[0]),
            "per_volume": [
                {"file": f, "dice": float(d), **{n: float(v) for n, v in zip(self.class_names, row)}}
                for f, d, row in zip(self._files or ["?"] * len(details), per_volume, details)
            ],
        }
        self.output_file.parent.mkdir(parents=True, exist_ok=True)
        self.output_file.write_text(json.dumps(summary, indent=1))
        engine.state.dice_summary = summary
        per_class = ", ".join(f"{k} {v:.4f}" for k, v in summary["dice_per_class"].items())
        logger.info(
            "Dice %.4f over %d volumes (%s); written to %s", summary["dice"], len(details), per_class, self.output_file
        )
