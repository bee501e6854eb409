"""Handler that summarises per-volume, per-class Dice of an evaluation run, with the literature's evaluation
variants, into a JSON file and the log."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from ignite.engine import Events
from monai.metrics import get_confusion_matrix

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

    The same run also gives the evaluation variants that the published figures use, from the one-hot ``pred`` and
    ``label`` of each volume in ``engine.state.output`` (the metric's own input; background channel 0 left out):

    - ``dice_ed``: the primary Dice over the end-diastole volumes only (``state_key`` equal to ``ed_value``), as
      GLCL (Chaitanya et al., NeurIPS 2020) scores ACDC; None when no volume carries ``state_key``;
    - ``dice_pooled_2d``: per class, one Dice of all slices of all volumes pooled, ``2 sum TP / (sum |P| + sum
      |G|)`` over every pixel of the test set, then the mean over classes (a class absent from both everywhere is
      left out), the Dice PCL's code (Zeng et al., MICCAI 2021) reports over its test slices.

    The primary figure stays ``dice``: the mean over volumes (ED and ES) of the 3D Dice of each volume.

    Args:
        metric_name: name of the metric in the evaluator.
        class_names: names of the foreground classes, in channel order.
        output_file: JSON file to write.
        filename_key: meta key with the volume's file name, for ``per_volume``.
        state_key: the item key of the volume's cardiac phase (``organ_state``: 0 end-diastole, 1 end-systole).
        ed_value: the value of ``state_key`` that marks end-diastole.
    """

    def __init__(
        self,
        metric_name: str,
        class_names: Sequence[str],
        output_file: str | os.PathLike,
        filename_key: str = "filename_or_obj",
        state_key: str = "organ_state",
        ed_value: int = 0,
    ) -> None:
        self.metric_name = metric_name
        self.class_names = list(class_names)
        self.output_file = Path(output_file)
        self.filename_key = filename_key
        self.state_key = state_key
        self.ed_value = ed_value
        self._files: list[str] = []
        self._states: list[int | None] = []
        self._counts: list[torch.Tensor] = []  # per volume: (3, classes) true positives, |P|, |G|

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.EPOCH_STARTED, self._reset)
        engine.add_event_handler(Events.ITERATION_COMPLETED, self._record)
        engine.add_event_handler(Events.EPOCH_COMPLETED, self)

    def _reset(self, engine: Engine) -> None:
        self._files.clear()
        self._states.clear()
        self._counts.clear()

    def _record(self, engine: Engine) -> None:
        batch = engine.state.batch  # a list of dicts once decollated, else a collated dict
        items = batch if isinstance(batch, list) else [batch]
        for item in items:
            names = getattr(item["image"], "meta", {}).get(self.filename_key, "?")
            names = names if isinstance(names, (list, tuple)) else [names]
            self._files.extend(str(n) for n in names)
            states = item.get(self.state_key)
            states = torch.as_tensor(states).reshape(-1).tolist() if states is not None else [None] * len(names)
            self._states.extend(int(s) if s is not None else None for s in states)
        output = engine.state.output
        for out in output if isinstance(output, list) else [output]:
            self._counts.extend(overlap_counts(out["pred"], out["label"], batched=not isinstance(output, list)))

    def __call__(self, engine: Engine) -> None:
        details = torch.as_tensor(engine.state.metric_details[self.metric_name]).float()  # (volumes, classes)
        if details.shape[1] != len(self.class_names):
            raise ValueError(
                f"Dice details have {details.shape[1]} classes but class_names has {len(self.class_names)}."
            )
        per_volume = details.nanmean(dim=1)
        states = self._states if len(self._states) == len(details) else [None] * len(details)
        ed = per_volume[torch.tensor([s == self.ed_value for s in states], dtype=torch.bool)]
        summary = {
            "dice": float(per_volume.nanmean()),
            "dice_std_over_volumes": float(per_volume[~per_volume.isnan()].std()) if len(per_volume) > 1 else 0.0,
            "dice_per_class": {n: float(details[:, i].nanmean()) for i, n in enumerate(self.class_names)},
            "num_volumes": int(details.shape[0]),
            "dice_ed": float(ed.nanmean()) if len(ed) else None,
            "num_volumes_ed": int(len(ed)),
            "dice_pooled_2d": pooled_dice(torch.stack(self._counts).sum(0)) if self._counts else None,
            "per_volume": [
                {"file": f, self.state_key: s, "dice": float(d), **{n: float(v) for n, v in zip(self.class_names, row)}}
                for f, s, d, row in zip(self._files or ["?"] * len(details), states, per_volume, details)
            ],
        }
        self.output_file.parent.mkdir(parents=True, exist_ok=True)
        self.output_file.write_text(json.dumps(summary, indent=1))
        engine.state.dice_summary = summary
        per_class = ", ".join(f"{k} {v:.4f}" for k, v in summary["dice_per_class"].items())
        logger.info(
            "Dice %.4f over %d volumes (%s); end-diastole only %s, pooled 2D %s; written to %s",
            summary["dice"],
            len(details),
            per_class,
            _fmt(summary["dice_ed"]),
            _fmt(summary["dice_pooled_2d"]),
            self.output_file,
        )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def overlap_counts(pred: torch.Tensor, label: torch.Tensor, batched: bool = False) -> list[torch.Tensor]:
    """
    Per volume, the foreground classes' true positives, predicted and labelled pixel counts of one-hot ``pred``
    and ``label`` (channel 0, the background, left out): a ``(3, classes)`` tensor per volume; ``batched``: the
    inputs are ``(B, C, ...)`` batches, else one ``(C, ...)`` volume.
    """
    pred, label = torch.as_tensor(pred).float(), torch.as_tensor(label).float()
    if not batched:
        pred, label = pred[None], label[None]
    if pred.shape != label.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and label {tuple(label.shape)} differ: one-hot of both expected.")
    tp, fp, _, fn = get_confusion_matrix(pred, label, include_background=False).unbind(-1)  # each (B, classes)
    return list(torch.stack([tp, tp + fp, tp + fn], dim=1).cpu())


def pooled_dice(counts: torch.Tensor) -> float | None:
    """``mean_c 2 TP_c / (|P|_c + |G|_c)`` of summed ``(3, classes)`` counts; a class with ``|P| + |G| = 0`` is left
    out (None when every class is)."""
    tp, p, g = counts
    present = (p + g) > 0
    if not present.any():
        return None
    return float((2 * tp[present] / (p[present] + g[present])).mean())
