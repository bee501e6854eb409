"""
Taking finished runs from another experiment instead of running them again: pre-trainings (``--pretrain-from``)
and fine-tuning cells (``--finetune-from``).

The paper's Tables 1, 3 and 4 fine-tune the same pre-trained encoders and share their baseline rows; an experiment
that adds rows (e.g. the semi-supervised methods of Table 3) need not pay for a pre-training, or for the random-init
and GCL cells, that another experiment already ran. A run is taken only when it is the same run: the same method,
the same bundle config and overrides (apart from the experiment's own folders and the device), the same settings
recorded when it ran (:py:mod:`experiments.settings`; a run from before that record is compared on its
overrides only, with a warning) and the same patients in every part of the split; a fine-tuning cell also the same
labelled draw and seed (its folder name) and the same encoder, byte for byte, as the one this experiment's cells of
that method load (their fingerprints, :py:func:`~experiments.fingerprints.encoder_hash`). Its folder is linked
(or copied) into this experiment and its ``benchmark.json`` records where it came from.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.done import pretrain_done, trained
from experiments.experiment import FinetuneCell, PretrainCell
from experiments.fingerprints import ENCODER_HASH_KEY, encoder_hash
from experiments.plan import PLAN_FILE, read_plan
from experiments.presets import METHODS
from experiments.settings import (
    IGNORED_KEYS,
    PRETRAIN_SETTINGS_KEY,
    SETTINGS_KEY,
    changed_settings,
    recorded_changes,
)
from experiments.status import read_status, write_status
from gcl_monai.utils import atomic_write

__all__ = [
    "find_reusable",
    "find_reusable_finetuning",
    "import_finetuning",
    "import_pretraining",
    "same_split",
]

logger = logging.getLogger("experiments")


def _portable(entry: dict[str, Any]) -> dict[str, Any]:
    """A split entry with its file paths reduced to the file names (one split written from two working folders)."""
    return {k: Path(v).name if k in ("image", "label") and isinstance(v, str) else v for k, v in entry.items()}


def same_split(first: Path, second: Path) -> bool:
    """Whether two split files hold the same volumes in every part (pretrain, train, val, test)."""
    a, b = (json.loads(Path(p).read_text()) for p in (first, second))

    def volumes(part: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(_portable(entry), sort_keys=True) for entry in part)

    return set(a) == set(b) and all(volumes(a[k]) == volumes(b[k]) for k in a)


def _settings(overrides: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps({k: v for k, v in overrides.items() if k not in IGNORED_KEYS}))


def find_reusable(cell: PretrainCell, source: Path) -> tuple[PretrainCell | None, str]:
    """
    The finished pre-training of ``cell.name`` (method and seed) in the experiment folder ``source`` if it is the
    same run as ``cell`` (else None), and the reason in words.
    """
    try:
        plan = read_plan(source)
    except FileNotFoundError as error:
        return None, str(error)
    stored = plan.get("pretrain", {}).get(cell.name)
    if stored is None:
        return None, f"{source} has no pre-training of {cell.name}"
    # the stored folders are those of the run; the experiment folder may have moved since
    folders = {"work_dir": str(source), "split_file": str(Path(source) / Path(stored["overrides"]["split_file"]).name)}
    other = PretrainCell(
        cell.method,
        Path(stored["bundle"]),
        {**stored["overrides"], **folders},
        stored.get("config", "pretrain"),
        cell.seed,
    )
    if other.config != cell.config:
        return None, f"{source}'s pre-training of {cell.name} ran {other.config}.json, not {cell.config}.json"
    if differ := changed_settings(_settings(other.overrides), _settings(cell.overrides)):
        return None, f"{source}'s pre-training of {cell.name} has other settings ({', '.join(differ)})"
    if not Path(other.overrides["split_file"]).exists():
        return None, f"{source} holds no {Path(other.overrides['split_file']).name}"
    if not same_split(Path(other.overrides["split_file"]), Path(cell.overrides["split_file"])):
        return None, f"{source} split the patients differently"
    if not pretrain_done(other):
        return None, f"{source}'s pre-training of {cell.name} has not finished"
    status = read_status(other.folder)
    if differ := [k for k, _, _ in recorded_changes(status, cell).get(SETTINGS_KEY, ())]:
        return None, f"{source}'s pre-training of {cell.name} ran with other bundle settings ({', '.join(differ)})"
    return other, f"the same pre-training ({status['status']}) in {source}"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def _take(folder: Path, taken: Path) -> None:
    """Links (or copies) the run folder ``taken`` to ``folder`` atomically and records where it came from."""
    with atomic_write(folder) as partial:
        shutil.copytree(taken, partial, copy_function=_link_or_copy)
    # write_status replaces the file (atomic_write): the linked benchmark.json of the source is not changed
    write_status(folder, {**read_status(taken), "reused_from": str(taken)})


def _import(cell: PretrainCell | FinetuneCell, sources: list[Path], find: Callable) -> Path | None:
    if cell.folder.exists():
        return None
    for source in sources:
        other, reason = find(cell, source)
        if other is None:
            logger.info("%s: not taken from %s: %s.", cell.label, source, reason)
            continue
        _take(cell.folder, other)
        return other
    return None


def _folder_of(found: tuple[PretrainCell | None, str]) -> tuple[Path | None, str]:
    return (None if found[0] is None else found[0].folder), found[1]


def import_pretraining(cell: PretrainCell, sources: list[Path]) -> Path | None:
    """
    Fills ``cell.folder`` with the first reusable pre-training among the experiment folders ``sources``
    (:py:func:`find_reusable`). Nothing is taken when ``cell.folder`` already exists: a run of this experiment's
    own (finished or interrupted) is never replaced.

    Returns:
        the folder taken (the caller logs it), or None; each source not taken is logged with its reason.
    """
    return _import(cell, sources, lambda c, source: _folder_of(find_reusable(c, source)))


def _legacy_finetune_settings(cell: FinetuneCell, source: Path) -> dict[str, Any]:
    """
    The overrides that ``source``'s plan gave its cell of the same name (for a cell from before the settings record):
    the preset's common and fine-tuning overrides, the method's and the cell's own.
    """
    preset = read_plan(source)["preset"]
    method = METHODS[cell.method]
    return _settings(
        {
            **preset.get("common", {}),
            **preset.get("finetune", {}),
            **method.finetune_overrides(),
            "init": method.pretrain_method or "random",
            "num_labeled": cell.num_labeled,
            "draw": cell.draw,
            "seed": cell.seed,
        }
    )


def _fingerprint(pretraining: Path) -> str | None:
    """
    The fingerprint of a pre-training's encoder: of its ``encoder.pt`` when here, else the one its status recorded
    (its records restored from another machine, :py:mod:`experiments.gpu_session.records`); None without either.
    """
    encoder = pretraining / "encoder.pt"
    return encoder_hash(encoder) if encoder.exists() else read_status(pretraining).get(ENCODER_HASH_KEY)


def find_reusable_finetuning(cell: FinetuneCell, source: Path) -> tuple[Path | None, str]:
    """
    The folder of the trained fine-tuning cell of the same name (method, L, draw, seed) in the experiment folder
    ``source`` if it is the same run as ``cell`` (else None), and the reason in words.

    Same run: ``source`` split the patients as this experiment does; the cell finished training with the settings
    ``cell`` would run (its recorded ``settings``, and ``pretrain_settings`` when recorded; for a cell from before
    the record, ``source``'s plan overrides, logged as a warning); and, for a pre-trained method, ``source``'s
    encoder of that method is byte for byte the one this experiment's cells load (its fingerprint, recorded in its
    status when the encoder itself stayed on another machine) (so take or run the pre-training
    first: the execution order does).
    """
    source = Path(source)
    if not (source / PLAN_FILE).exists():
        return None, f"{source} holds no {PLAN_FILE}"
    folder = source / "finetune" / cell.folder.name
    status = read_status(folder)
    if not trained(status):
        return None, f"{source} has no trained {cell.folder.name}"
    split_file = Path(cell.train_overrides["split_file"])
    if not (source / split_file.name).exists():
        return None, f"{source} holds no {split_file.name}"
    if not same_split(source / split_file.name, split_file):
        return None, f"{source} split the patients differently"
    changes = {record: [k for k, _, _ in items] for record, items in recorded_changes(status, cell).items()}
    if SETTINGS_KEY in status:
        if differ := changes[SETTINGS_KEY]:
            return None, f"{source}'s {cell.folder.name} ran with other settings ({', '.join(differ)})"
    elif differ := changed_settings(_legacy_finetune_settings(cell, source), _settings(cell.train_overrides)):
        return None, f"{source}'s {cell.folder.name} ran with other overrides ({', '.join(differ)})"
    if cell.pretrain is not None:
        theirs, ours = _fingerprint(source / "pretrain" / cell.pretrain.name), _fingerprint(cell.pretrain.folder)
        if theirs is None or theirs != ours:
            return None, f"{source}'s {cell.pretrain.name} encoder is not the one this experiment loads"
        if differ := changes.get(PRETRAIN_SETTINGS_KEY):
            changed = ", ".join(differ)
            return None, f"{source}'s {cell.folder.name} loaded a pre-training with other settings ({changed})"
    if SETTINGS_KEY not in status:
        logger.warning(
            "%s: taking %s, which ran before settings were recorded: compared on %s's plan overrides only.",
            cell.label,
            folder,
            source,
        )
    return folder, f"the same fine-tuning ({status.get('status')}) in {source}"


def import_finetuning(cell: FinetuneCell, sources: list[Path]) -> Path | None:
    """
    Fills ``cell.folder`` with the first reusable fine-tuning cell among the experiment folders ``sources``
    (:py:func:`find_reusable_finetuning`); a test set it was not evaluated on is then evaluated by the run. Nothing
    is taken when ``cell.folder`` already exists.

    Returns:
        the folder taken (the caller logs it), or None; each source not taken is logged with its reason.
    """
    return _import(cell, sources, find_reusable_finetuning)
