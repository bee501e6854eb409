"""
How good is an encoder's representation for segmentation? The dense linear probe fitted on some patients and
scored on others: cross-validated over the training patients (for choices), or fitted on them and scored on the test
patients (for the final report).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from gcl_monai.probe.data import patient_folds
from gcl_monai.probe.features import BN_STATS, FrozenEncoder, recompute_batch_norm
from gcl_monai.probe.linear import ProbeVolume, fit_probe, score_probe

__all__ = ["ProbeSettings", "evaluate_encoder", "summarise"]

logger = logging.getLogger("gcl_monai.probe")


@dataclass(frozen=True)
class ProbeSettings:
    """
    The probe's settings (recorded in every ``probe.json``).

    Args:
        grid: in-plane size of the features the probe reads (the five levels resized to it).
        pixels_per_class: class-balanced sample of the fit patients' pixels.
        fit_patients: at most this many patients fit a probe (a seeded subset of the fit side), so that the cost does
            not grow with the data set.
        folds: cross-validation folds over the training patients (``evaluate_encoder`` without test volumes).
        regularization: ``C`` of the logistic regression (on standardised features).
        bn_stats: :py:data:`gcl_monai.probe.features.BN_STATS`.
        seed: the seed of the folds, the fit subset and the pixel sample (never of the encoder).
    """

    grid: tuple[int, int] = (64, 64)
    pixels_per_class: int = 15000
    fit_patients: int = 20
    folds: int = 4
    regularization: float = 1.0
    bn_stats: str = "recompute"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bn_stats not in BN_STATS:
            raise ValueError(f"bn_stats must be one of {BN_STATS}, got {self.bn_stats!r}.")


def _fit_subset(patients: Sequence[str], count: int, seed: int) -> list[str]:
    patients = sorted(patients)
    if len(patients) <= count:
        return patients
    return sorted(patients[i] for i in np.random.default_rng(seed).permutation(len(patients))[:count])


def _one_split(
    encoder: FrozenEncoder, fit: list[ProbeVolume], score: list[ProbeVolume], num_classes: int, s: ProbeSettings
) -> list[dict]:
    if s.bn_stats == "recompute":
        recompute_batch_norm(encoder, torch.cat([v.image for v in fit]))
    probe = fit_probe(encoder, fit, num_classes, s.pixels_per_class, s.seed, s.regularization)
    return score_probe(encoder, probe, score, num_classes)


def summarise(scores: Sequence[dict], class_names: Sequence[str]) -> dict:
    """Mean Dice and mean per class over the scored volumes (classes absent from a volume left out of its mean)."""
    per_class = np.array([s["dice_per_class"] for s in scores], dtype=float)
    with np.errstate(invalid="ignore"):
        class_means = [float(np.nanmean(c)) if np.isfinite(c).any() else math.nan for c in per_class.T]
    return {
        "dice": float(np.nanmean([s["dice"] for s in scores])),
        "dice_per_class": dict(zip(class_names, class_means)),
        "num_volumes": len(scores),
    }


def evaluate_encoder(
    encoder: FrozenEncoder,
    train_volumes: Sequence[ProbeVolume],
    num_classes: int,
    class_names: Sequence[str],
    test_volumes: Sequence[ProbeVolume] | None = None,
    settings: ProbeSettings = ProbeSettings(),
    groups: dict[str, str] | None = None,
) -> dict:
    """
    The probe's Dice of ``encoder``. Without ``test_volumes``: ``settings.folds``-fold cross-validation over the
    patients of ``train_volumes`` (each fold's patients scored by a probe fitted on at most ``fit_patients`` of the
    others), the measure to choose on. With ``test_volumes``: one probe fitted on at most ``fit_patients`` training
    patients, scored on the test volumes (the final report only). The encoder's weights are never changed; with
    ``bn_stats="recompute"`` its batch-norm statistics are re-estimated on each fit side.

    Returns:
        ``{"dice", "dice_per_class", "num_volumes", "volumes": [per volume], "folds": [...], "settings",
        "seconds"}``.
    """
    start = time.time()
    by_patient: dict[str, list[ProbeVolume]] = {}
    for v in train_volumes:
        by_patient.setdefault(v.patient, []).append(v)
    if test_volumes is not None:
        fit_ids = _fit_subset(list(by_patient), settings.fit_patients, settings.seed)
        splits = [(fit_ids, list(test_volumes))]
    else:
        splits = []
        for k, held_out in enumerate(patient_folds(train_volumes, settings.folds, settings.seed, groups)):
            rest = [p for p in by_patient if p not in held_out]
            fit_ids = _fit_subset(rest, settings.fit_patients, settings.seed + k)
            splits.append((fit_ids, [v for p in held_out for v in by_patient[p]]))
    scores, folds = [], []
    for fit_ids, score_volumes in splits:
        fit = [v for p in fit_ids for v in by_patient[p]]
        fold_scores = _one_split(encoder, fit, score_volumes, num_classes, settings)
        scores += fold_scores
        folds.append(
            {
                "fit_patients": fit_ids,
                "scored_patients": sorted({v.patient for v in score_volumes}),
                **summarise(fold_scores, class_names),
            }
        )
        logger.info(
            "Probe %d/%d: fitted on %d patients, %d volumes scored, Dice %.4f (%.0f s so far).",
            len(folds),
            len(splits),
            len(fit_ids),
            len(score_volumes),
            folds[-1]["dice"],
            time.time() - start,
        )
    return {
        **summarise(scores, class_names),
        "volumes": scores,
        "folds": folds,
        "settings": {**asdict(settings), "mode": "test" if test_volumes is not None else "cross-validation"},
        "seconds": round(time.time() - start, 1),
    }
