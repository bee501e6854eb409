"""
The pre-trained encoders of a GPU session kept as encoder cards (:py:func:`gcl_monai.networks.keep_encoder`): each
finished pre-training's ``encoder.pt`` in bfloat16 (9.4 MB at the paper's width, 2.4 MB at half width) with its card
(recipe, seed, commit, probe Dice, architecture, SHA-256), so that later cells can fine-tune the same encoders on any
machine without pre-training again (docs/protocol_gpu_seeds.md, amendment 1).

On the device they are written into the work folder's ``encoders/<experiment>/<pre-training>.pt`` and ``.json``
(:py:func:`keep_encoders`), which the pack brings back inside its archive; on this side ``--collect`` copies them
into the run's results folder, ``docs/results/<run>/encoders/`` (:py:func:`collect_encoders`). A CPU experiment
that spans sessions keeps them with ``python -m experiments keep --encoders`` (:py:func:`keep_experiment_encoders`)
and, on a new machine, puts them back as its pre-trainings' ``encoder.pt`` with ``restore --encoders``
(:py:func:`restore_experiment_encoders`) instead of pre-training again.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from experiments.fingerprints import ENCODER_HASH_KEY, encoder_hash
from experiments.progress import logged_to
from experiments.status import STATUS_FILE, read_status, write_status
from gcl_monai.networks import keep_encoder, restore_encoder
from gcl_monai.networks.keep import last_probe
from gcl_monai.utils import atomic_write

__all__ = [
    "ENCODERS",
    "RESTORED_KEY",
    "collect_encoders",
    "finished_cells",
    "keep_encoders",
    "keep_experiment_encoders",
    "restore_experiment_encoders",
]

logger = logging.getLogger("experiments")

#: the folder of the work folder (and of a results folder) that holds the kept encoders
ENCODERS = "encoders"
#: a pre-training's folder name: ``<method>``, or ``<method>_p<pre-training seed>``
_PRETRAIN_NAME = re.compile(r"^(?P<method>.+?)(?:_p(?P<seed>\d+))?$")
#: the status key of a pre-training whose ``encoder.pt`` was put back from its kept bfloat16 card
RESTORED_KEY = "encoder_restored"


def _commit(checkout: Path | None) -> str | None:
    """The commit of ``checkout`` (None outside a git checkout: a session's copy of the tree may have no history)."""
    if checkout is None:
        return None
    result = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else None


def keep_encoders(work: Path, budget: str, checkout: Path | None = None) -> list[Path]:
    """
    Keeps the encoder of each finished pre-training of the work folder ``work`` as a card (see the module's
    description): :func:`keep_experiment_encoders` of each of its experiments, into ``encoders/<experiment>/``.

    Args:
        work: the run's work folder.
        budget: the run's budget, recorded on the card.
        checkout: the checkout that ran it (its commit recorded on the card; None: no commit).

    Returns:
        the kept weights, one ``.pt`` per encoder (each card beside it).
    """
    work = Path(work)
    kept = []
    for experiment in sorted({s.parents[2] for s in work.glob(f"results/*/pretrain/*/{STATUS_FILE}")}):
        kept += keep_experiment_encoders(experiment, work / ENCODERS / experiment.name, budget, checkout)
    return kept


def keep_experiment_encoders(experiment: Path, into: Path, budget: str, checkout: Path | None = None) -> list[Path]:
    """
    Keeps the encoder of each finished pre-training of the experiment folder ``experiment`` as a card in ``into``:
    ``<pre-training>.pt`` in bfloat16 and its ``.json`` (recipe and seed from the folder's name, the experiment,
    ``budget``, the commit of ``checkout``, the float32 encoder's SHA-256 (:func:`_first_fingerprint`) and its last
    probe). A card already kept of the same encoder is not written again.

    Returns:
        the kept weights, one ``.pt`` per encoder; an encoder that is no ``BasicUNet`` encoder gets no card (logged).
    """
    experiment, into = Path(experiment), Path(into)
    kept = []
    for status_file in sorted(experiment.glob(f"pretrain/*/{STATUS_FILE}")):
        folder, encoder = status_file.parent, status_file.parent / "encoder.pt"
        status = read_status(folder)
        if status.get("status") != "finished" or not encoder.exists():
            continue
        out = into / f"{folder.name}.pt"
        card = out.with_suffix(".json")
        fingerprint = _first_fingerprint(status, encoder)
        if not (out.exists() and card.exists() and json.loads(card.read_text()).get("encoder_sha256") == fingerprint):
            name = _PRETRAIN_NAME.match(folder.name)
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                keep_encoder(
                    encoder,
                    out,
                    recipe=name["method"],
                    seed=int(name["seed"] or 0),
                    experiment=experiment.name,
                    budget=budget,
                    commit=_commit(checkout),
                    encoder_sha256=fingerprint,
                    **last_probe(folder),
                )
            except (ValueError, RuntimeError) as error:  # not a BasicUNet encoder: the float32 one still comes back
                logger.warning("No card kept of %s: %s", encoder, error)
                continue
        kept.append(out)
    return kept


def _first_fingerprint(status: Mapping[str, Any], encoder: Path) -> str:
    """
    The SHA-256 of the float32 encoder that the pre-training's ``encoder`` stands for: its own, or, where it is the
    file put back from a kept card (:py:data:`RESTORED_KEY`), the first encoder's (the status's
    :py:data:`~experiments.fingerprints.ENCODER_HASH_KEY`): its weights are that card's bfloat16 ones, which a card
    kept of it again holds bit for bit, and a later restore checks the card against the first fingerprint.
    """
    made = encoder_hash(encoder)
    restore = status.get(RESTORED_KEY)
    return status[ENCODER_HASH_KEY] if restore is not None and restore["sha256"] == made else made


def restore_experiment_encoders(experiment: Path, encoders: Path) -> list[Path]:
    """
    Puts back the encoder of each finished pre-training of the experiment folder ``experiment`` (records restored on
    a new machine: statuses, no weights) from its card in ``encoders`` (:py:func:`keep_experiment_encoders`): float32
    again from bfloat16 (:py:func:`gcl_monai.networks.restore_encoder`; each weight within 2^-9 of its value), so that
    a rerun of the experiment's command takes the pre-training as done and fine-tunes the cells left from it instead
    of pre-training again (which takes as long as the first time and need not give the same bytes on another CPU).
    The status records it under :py:data:`RESTORED_KEY` (the card, the stored dtype, the written file's SHA-256,
    the time, and ``cells_finished``: the experiment's fine-tuning cells already finished, which loaded the first
    weights; a pre-training restored before keeps the first restore's, since the cells finished since then loaded
    the rounded weights too, and lists the earlier restores' times under ``restored_before``) and a line goes to
    the experiment's ``progress.log``, so that the cells that loaded the rounded weights
    can be told from those that loaded the first ones (:py:mod:`experiments.study.restored`; the records carry no
    checkpoint, so a cell left unfinished starts again from the restored encoder). A pre-training with its
    ``encoder.pt`` on this machine, not finished, or without a card is left as it is.

    Returns:
        the ``encoder.pt`` files written.

    Raises:
        ValueError: naming the card and the status, when the card was kept of another encoder than the one the
            status fingerprinted (``encoder_sha256``), or the status has no fingerprint to check it against; and
            :py:func:`~gcl_monai.networks.restore_encoder`'s refusals (weights that changed, another card version).
    """
    experiment, encoders = Path(experiment), Path(encoders)
    finished = finished_cells(experiment)
    written = []
    for status_file in sorted(experiment.glob(f"pretrain/*/{STATUS_FILE}")):
        folder = status_file.parent
        status, encoder, card_file = read_status(folder), folder / "encoder.pt", encoders / f"{folder.name}.json"
        if status.get("status") != "finished" or encoder.exists() or not card_file.exists():
            continue
        card = json.loads(card_file.read_text())
        recorded = status.get(ENCODER_HASH_KEY)
        if recorded is None or card.get("encoder_sha256") != recorded:
            raise ValueError(
                f"{card_file} was kept of the encoder with sha256 {card.get('encoder_sha256')}, but {status_file} "
                f"fingerprints {recorded}: not the encoder this pre-training made."
            )
        with atomic_write(encoder) as partial:
            torch.save(restore_encoder(card_file), partial)
        earlier = status.get(RESTORED_KEY)
        restored = {
            "card": card_file.name,
            "stored_dtype": card["stored_dtype"],
            "sha256": encoder_hash(encoder),
            "at": datetime.now().isoformat(timespec="seconds"),
            "cells_finished": finished if earlier is None else earlier["cells_finished"],
        }
        if earlier is not None:
            restored["restored_before"] = [*earlier.get("restored_before", []), earlier["at"]]
        write_status(folder, {**status, RESTORED_KEY: restored})
        with logged_to(experiment / "progress.log"):
            logger.info(
                "pretrain %s: encoder.pt restored from the kept %s card %s (sha256 %s); the cells that start from "
                "here on load it",
                folder.name,
                card["stored_dtype"],
                card_file.name,
                restored["sha256"],
            )
        written.append(encoder)
    return written


def finished_cells(experiment: Path) -> list[str]:
    """The names of the experiment folder's fine-tuning cells whose status says finished."""
    return sorted(
        f.parent.name
        for f in Path(experiment).glob(f"finetune/*/{STATUS_FILE}")
        if read_status(f.parent).get("status") == "finished"
    )


def collect_encoders(work: Path, into: Path) -> list[Path]:
    """
    Copies the kept encoders of the work folder ``work`` (weights and cards, of every experiment) into
    ``into/encoders/``.

    Returns:
        the files written.
    """
    written = []
    for path in sorted(Path(work).glob(f"{ENCODERS}/*/*")):
        if path.suffix in (".pt", ".json"):
            target = Path(into) / ENCODERS / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            written.append(target)
    return written
