"""
Running one cell: a pre-training (resumed when interrupted, a collapse recorded as final) or a fine-tuning and its
evaluations, each with a ``benchmark.json`` status file in its folder; before a run, the cells whose status file
records other settings than the plan gives them today are refused (:py:func:`check_cell_settings`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from experiments.bundles import bundle_config, parse_bundle_item, run_bundle
from experiments.experiment import FinetuneCell, PretrainCell
from experiments.report import read_scalars
from experiments.settings import PRETRAIN_SETTINGS_KEY, SETTINGS_KEY, cell_settings, recorded_changes
from gcl_monai.data import num_slices
from gcl_monai.handlers import RepresentationCollapse
from gcl_monai.losses import chance_level
from gcl_monai.networks import ENCODER_PREFIXES
from gcl_monai.utils import atomic_write

__all__ = [
    "ENCODER_HASH_KEY",
    "REMADE_HASH_KEY",
    "STATUS_FILE",
    "check_cell_settings",
    "encoder_elsewhere",
    "encoder_hash",
    "finetune_done",
    "forget_encoder_hash",
    "labelled_subset",
    "pretrain_done",
    "read_status",
    "record_encoder_hash",
    "resolve_iterations",
    "run_finetune",
    "run_pretrain",
    "tensorboard_collapse",
    "trained",
    "write_status",
]

logger = logging.getLogger("experiments")

STATUS_FILE = "benchmark.json"
# the status key of a finished pre-training's encoder fingerprint (:py:func:`encoder_hash`)
ENCODER_HASH_KEY = "encoder_sha256"
# the status key, beside a failed pre-training's first fingerprint, of the encoder it made again with other bytes
REMADE_HASH_KEY = "remade_sha256"


def _cause(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``error`` or the exception of type ``kind`` it was raised from (bundle expressions wrap exceptions)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def read_status(folder: Path) -> dict[str, Any]:
    path = Path(folder) / STATUS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def write_status(folder: Path, status: Mapping[str, Any]) -> None:
    with atomic_write(Path(folder) / STATUS_FILE) as partial:
        partial.write_text(json.dumps(dict(status), indent=1))


def _config_value(cell: PretrainCell, key: str) -> Any:
    return cell.overrides[key] if key in cell.overrides else bundle_config(cell.bundle, cell.config)[key]


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


def pretrain_done(cell: PretrainCell) -> bool:
    """Finished with the requested number of epochs, or collapsed (a collapse is final: delete the folder to retry)."""
    status = read_status(cell.folder)
    if status.get("status") == "collapsed":
        return True
    return (
        status.get("status") == "finished"
        and status.get("epochs") == _config_value(cell, "epochs")
        and (cell.folder / "encoder.pt").exists()
    )


def encoder_elsewhere(cell: PretrainCell) -> bool:
    """
    Whether the pre-training finished, with its encoder's fingerprint recorded, but its ``encoder.pt`` is not here
    (its records kept and restored on another machine, :py:mod:`experiments.records`).
    """
    status = read_status(cell.folder)
    return (
        status.get("status") == "finished" and ENCODER_HASH_KEY in status and not (cell.folder / "encoder.pt").exists()
    )


def record_encoder_hash(cell: PretrainCell) -> None:
    """Adds the encoder's fingerprint to the status of a finished pre-training that ran before it was recorded."""
    status = read_status(cell.folder)
    encoder = cell.folder / "encoder.pt"
    if status.get("status") == "finished" and ENCODER_HASH_KEY not in status and encoder.exists():
        write_status(cell.folder, {**status, ENCODER_HASH_KEY: encoder_hash(encoder)})


def forget_encoder_hash(cell: PretrainCell) -> None:
    """Drops a pre-training's recorded fingerprint: its encoder is to be made again and no cell loaded the first."""
    status = read_status(cell.folder)
    write_status(cell.folder, {k: v for k, v in status.items() if k != ENCODER_HASH_KEY})


def finetune_done(cell: FinetuneCell) -> bool:
    """Evaluated on every test set (a ``dice.json`` each)."""
    return all(cell.dice_file(test_set).exists() for test_set in cell.eval_overrides)


def run_pretrain(cell: PretrainCell) -> str:
    """
    Runs (or resumes) a pre-training; returns its status: ``finished``, ``collapsed`` or ``failed``. The status
    file records the run's settings (:py:mod:`experiments.settings`) from its start.
    """
    status = read_status(cell.folder)
    settings = cell_settings(cell)
    # the fingerprint of an encoder this cell made before (its weights lost since, its status kept): carried through
    # every status written below, so that an interrupted re-creation still checks against it
    kept = {ENCODER_HASH_KEY: status[ENCODER_HASH_KEY]} if ENCODER_HASH_KEY in status else {}
    # written first: a run killed outright still leaves its settings beside its checkpoints
    write_status(cell.folder, {**status, "status": "interrupted", SETTINGS_KEY: settings})
    epochs, batch_size = _config_value(cell, "epochs"), _config_value(cell, "batch_size")
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
        made = encoder_hash(cell.folder / "encoder.pt")
        if kept and made != kept[ENCODER_HASH_KEY]:
            outcome = "failed"
            message = (
                f"{cell.folder / 'encoder.pt'} was made again and differs from the encoder this cell made before "
                f"(sha256 {made}, recorded {kept[ENCODER_HASH_KEY]}): the fine-tuning cells that loaded the first "
                "one would mix with cells loading this one. Run the pre-training on the machine and thread count "
                "it first ran with, or rerun with --set-aside-stale-cells to take this encoder and run those cells "
                "again (the first ones moved to the experiment's discarded/)."
            )
            logger.error("Pre-training %s: %s", cell.method, message)
            kept = {**kept, REMADE_HASH_KEY: made}
        kept = {**kept, ENCODER_HASH_KEY: kept.get(ENCODER_HASH_KEY, made)}
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


def encoder_hash(path: Path) -> str:
    """The SHA-256 of an encoder file's bytes (``torch.save`` of the same tensors writes the same bytes)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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


def trained(status: Mapping[str, Any]) -> bool:
    """Whether a fine-tuning cell's status says its training finished (a rerun then only evaluates it)."""
    return bool(status.get("trained") or status.get("status") == "finished")


#: why a test set added after a cell's training on another machine has no Dice (:py:func:`model_elsewhere`)
MODEL_ELSEWHERE = "not evaluated: its model is not on this machine (a model stays where it was trained)"


def model_elsewhere(cell: FinetuneCell) -> bool:
    """Whether ``cell`` finished training and its model is not here (its records restored from the machine that
    trained it, where the model stayed): an evaluation it has not had (a test set added since) cannot run here."""
    return trained(read_status(cell.folder)) and not (Path(cell.train_overrides["ckpt_dir"]) / "model.pt").exists()


def check_cell_settings(cells: Sequence[PretrainCell | FinetuneCell]) -> int:
    """
    Refuses to go on when a cell that a rerun would take as done (or resume) ran with other settings than the plan
    gives it today (:py:mod:`experiments.settings`): a pre-training with a status file, a fine-tuning that
    finished training (its own settings, and those of the pre-training whose encoder it loaded, when recorded).

    Raises:
        ValueError: naming every such cell, the keys that differ with both values, and what to do.

    Returns:
        the number of such cells that ran before settings were recorded (not checked; logged as a warning).
    """
    stale, unrecorded = [], 0
    for cell in cells:
        status = read_status(cell.folder)
        if isinstance(cell, FinetuneCell) and not trained(status):
            continue  # trained again by the run
        if not status:
            continue
        if SETTINGS_KEY not in status:
            unrecorded += 1
            continue
        whose = {SETTINGS_KEY: "", PRETRAIN_SETTINGS_KEY: "its pre-training's "}
        changes = [
            f"{whose[record]}{k} was {was!r}, now {now!r}"
            for record, items in recorded_changes(status, cell).items()
            for k, was, now in items
        ]
        if changes:
            stale.append(f"{cell.label} ({cell.folder}): {', '.join(changes)}")
    if stale:
        raise ValueError(
            "These cells ran with other settings than this plan gives them, and a rerun would take them as done: "
            + "; ".join(stale)
            + ". Delete their folders to run them again with today's settings, or use another --name."
        )
    if unrecorded:
        logger.warning("%d cells ran before their settings were recorded: taken as done without a check.", unrecorded)
    return unrecorded


def run_finetune(cell: FinetuneCell) -> str:
    """
    Fine-tunes (unless a previous run of the cell finished training) and evaluates on every test set without a
    ``dice.json``. A ``model.pt`` left by an interrupted fine-tuning is a partly trained model: it is retrained.
    The status file records the training's settings and those of the pre-training it loads
    (:py:mod:`experiments.settings`).
    """
    status = read_status(cell.folder)
    try:
        if not trained(status):
            status[SETTINGS_KEY] = cell_settings(cell)
            if cell.pretrain is not None:
                status[PRETRAIN_SETTINGS_KEY] = cell_settings(cell.pretrain)
            resolve_iterations(cell.train_overrides, labelled_subset(cell))
            start = time.time()
            run_bundle(cell.bundle, "train", "run", cell.train_overrides)
            status["finetune_seconds"] = time.time() - start
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
