"""
Running one cell: a pre-training (resumed when interrupted, a collapse recorded as final, the encoder's fingerprint
recorded) or a fine-tuning and its evaluations, each writing its status file (:py:mod:`experiments.status`) with
the settings it ran with (:py:mod:`experiments.settings`).
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import torch

from experiments.bundles import parse_bundle_item, run_bundle
from experiments.done import trained
from experiments.experiment import FinetuneCell, PretrainCell
from experiments.fingerprints import ENCODER_HASH_KEY, made_encoder
from experiments.report import read_scalars
from experiments.settings import PRETRAIN_SETTINGS_KEY, SETTINGS_KEY, cell_settings
from experiments.status import read_status, write_status
from gcl_monai.data import num_slices
from gcl_monai.handlers import RepresentationCollapse
from gcl_monai.losses import chance_level
from gcl_monai.networks import ENCODER_PREFIXES
from gcl_monai.utils import atomic_write

__all__ = [
    "labelled_subset",
    "last_validation_dice",
    "resolve_iterations",
    "run_finetune",
    "run_pretrain",
    "tensorboard_collapse",
]

logger = logging.getLogger("experiments")


def _cause(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``error`` or the exception of type ``kind`` it was raised from (bundle expressions wrap exceptions)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def tensorboard_collapse(
    tb_dir: Path, batch_size: int, window: int = 10, tol: float = 1e-3, min_std: float = 1e-3
) -> tuple[bool, float | None, float | None]:
    """
    Whether a finished pre-training ended collapsed, read from its TensorBoard scalars: over the last ``window``
    iterations, every image-wise loss ``img/*`` within ``tol`` of :math:`\\ln(2B - 1)` (all embeddings identical) or
    ``std/img`` below ``min_std``.

    Returns:
        (collapsed, final total loss, final ``std/img``), the last two averaged over the window (None if not logged).
    """
    scalars = read_scalars(tb_dir)

    def final(tag: str) -> float | None:
        return float(scalars[tag][1][-window:].mean()) if tag in scalars and len(scalars[tag][1]) else None

    chance = chance_level(batch_size)
    # every logged value of the window near chance, not its mean (a noisy loss can average to ln(2B - 1))
    img = [scalars[t][1][-window:] for t in scalars if t.startswith("img/")]
    stuck = bool(img) and all(len(v) and float(abs(v - chance).max()) < tol for v in img)
    loss, std = final("loss"), final("std/img")
    return stuck or (std is not None and std < min_std), loss, std


def run_pretrain(cell: PretrainCell) -> str:
    """
    Runs (or resumes) a pre-training; returns its status: ``finished``, ``collapsed`` or ``failed``. The status
    file records the run's settings (:py:mod:`experiments.settings`) from its start.
    """
    status = read_status(cell.folder)
    settings = cell_settings(cell)
    # the fingerprint of an encoder this cell made before (its weights lost since, its status kept): carried through
    # every status written below, so that an interrupted run that makes it again still checks against it
    recorded = status.get(ENCODER_HASH_KEY)
    kept = {ENCODER_HASH_KEY: recorded} if recorded is not None else {}
    # written first: a run killed outright still leaves its settings beside its checkpoints
    write_status(cell.folder, {**status, "status": "interrupted", SETTINGS_KEY: settings})
    epochs, batch_size = cell.config_value("epochs"), cell.config_value("batch_size")
    outcome, message = "failed", ""
    start = time.time()
    try:
        if cell.config == "train":
            _run_supervised_pretraining(cell)
        else:
            run_bundle(cell.bundle, "pretrain", "pretrain", cell.overrides)
        outcome = "finished"
    except Exception as error:  # reported in the CSV; the other methods still run
        collapse = _cause(error, RepresentationCollapse)
        if collapse is None:
            logger.exception("Pre-training %s failed.", cell.method)
        outcome, message = ("collapsed", str(collapse)) if collapse else ("failed", repr(error))
    finally:
        seconds = status.get("seconds", 0.0) + time.time() - start
        interrupted = {"status": "interrupted", "seconds": seconds, "epochs": epochs, SETTINGS_KEY: settings, **kept}
        write_status(cell.folder, interrupted)
    collapsed, loss, std = tensorboard_collapse(cell.folder / "tensorboard", batch_size)
    if outcome == "finished" and collapsed:
        outcome, message = "collapsed", f"final image-wise losses at ln(2B-1) or std/img {std} below 1e-3"
    if outcome == "finished":
        kept, message = made_encoder(cell.folder / "encoder.pt", recorded)
        if message:
            outcome = "failed"
            logger.error("Pre-training %s: %s", cell.method, message)
    if outcome == "collapsed":
        logger.error(
            "REPRESENTATION COLLAPSE in %s: %s. Its fine-tuning cells are reported as collapsed.", cell.method, message
        )
    write_status(
        cell.folder,
        {
            "status": outcome,
            "seconds": seconds,
            "epochs": epochs,
            "batch_size": batch_size,
            "final_loss": loss,
            "final_std": std,
            "message": message,
            SETTINGS_KEY: settings,
            **kept,
        },
    )
    return outcome


def _run_supervised_pretraining(cell: PretrainCell) -> None:
    """
    ``train.json`` with the cell's overrides, then the trained U-Net's encoder (``conv_0.*`` .. ``down_4.*``, the keys
    of :py:data:`gcl_monai.networks.ENCODER_PREFIXES`) written to ``encoder.pt``, as a contrastive pre-training
    leaves it.
    """
    labelled = parse_bundle_item(cell.bundle, "train", "labeled", cell.overrides)
    resolve_iterations(cell.overrides, labelled)
    run_bundle(cell.bundle, "train", "run", cell.overrides)
    model = torch.load(Path(cell.overrides["ckpt_dir"]) / "model.pt", map_location="cpu", weights_only=True)
    encoder = {k: v for k, v in model.items() if k.startswith(ENCODER_PREFIXES)}
    if not encoder:
        raise KeyError(f"{cell.overrides['ckpt_dir']}/model.pt holds no encoder key ({', '.join(ENCODER_PREFIXES)}).")
    with atomic_write(cell.folder / "encoder.pt") as partial:
        torch.save(encoder, partial)


def labelled_subset(cell: FinetuneCell) -> list[dict]:
    """The labelled volumes of a fine-tuning cell, as the bundle draws them (its ``labeled`` item)."""
    return parse_bundle_item(cell.bundle, "train", "labeled", cell.train_overrides)


def resolve_iterations(train_overrides: dict[str, Any], labelled: list[dict]) -> None:
    """With ``iterations_per_epoch`` None (the paper's epochs), one pass over the labelled slices per epoch."""
    if train_overrides.get("iterations_per_epoch", 0) is None:
        slices = sum(num_slices(item) for item in labelled)
        train_overrides["iterations_per_epoch"] = math.ceil(slices / train_overrides["batch_size"])


def last_validation_dice(cell: FinetuneCell) -> float:
    """
    The mean Dice on the validation patients at the last validation of a fine-tuning (the train bundle's
    ``val_mean_dice``, read from its TensorBoard scalars): the model at the end of training, an unbiased figure for
    choosing a recipe (the kept ``model.pt`` is the best of the validations, so its own validation Dice is
    optimistic). NaN when the run logged no validation.
    """
    values = read_scalars(cell.folder / "tensorboard").get("val_mean_dice", ((), ()))[1]
    return float(values[-1]) if len(values) else math.nan


def run_finetune(cell: FinetuneCell) -> str:
    """
    Fine-tunes (unless a previous run of the cell finished training) and evaluates on every test set without a
    ``dice.json``. The status file records the training's settings and those of the pre-training it loads
    (:py:mod:`experiments.settings`), written before the training starts: an interrupted fine-tuning whose recorded
    settings are today's continues from its last checkpoint (``train.json``'s ``resume``; not with a
    semi-supervised switch, whose teacher is not checkpointed), any other starts afresh, removing the earlier
    checkpoints. ``finetune_seconds`` counts the training's time over every attempt that returned.
    """
    status = read_status(cell.folder)
    try:
        if not trained(status):
            settings = {SETTINGS_KEY: cell_settings(cell)}
            if cell.pretrain is not None:
                settings[PRETRAIN_SETTINGS_KEY] = cell_settings(cell.pretrain)
            same = all(status.get(key) == value for key, value in settings.items())
            resume = same and cell.train_overrides.get("semi_supervised") is None
            status.update(settings, status="interrupted")
            status["finetune_seconds"] = status.get("finetune_seconds", 0.0) if resume else 0.0
            write_status(cell.folder, status)  # its settings beside its checkpoints, should the run be killed
            resolve_iterations(cell.train_overrides, labelled_subset(cell))
            start = time.time()
            try:
                run_bundle(cell.bundle, "train", "run", {**cell.train_overrides, "resume": resume})
            finally:
                status["finetune_seconds"] += time.time() - start
            status["iterations"] = cell.train_overrides["epochs"] * cell.train_overrides["iterations_per_epoch"]
            status["val_dice"] = last_validation_dice(cell)
            status["trained"] = True
            write_status(cell.folder, status)
        for test_set, overrides in cell.eval_overrides.items():
            if not cell.dice_file(test_set).exists():
                start = time.time()
                run_bundle(cell.bundle, "evaluate", "run", overrides)
                status.setdefault("eval_seconds", {})[test_set] = time.time() - start
        status.update(status="finished", message="")
    except Exception as error:  # reported in the CSV; the other cells still run
        logger.exception("Fine-tuning cell %s failed.", cell.folder.name)
        status.update(status="failed", message=repr(error))
    write_status(cell.folder, status)
    return status["status"]
