"""
Taking a finished pre-training from another experiment instead of running it again (``--pretrain-from``).

The paper's Tables 1, 3 and 4 fine-tune the same pre-trained encoders; an experiment that adds rows (e.g. the
semi-supervised methods of Table 3) need not pay for a pre-training that another experiment already ran. A
pre-training is taken only when it is the same run: the same method, the same bundle config and overrides (apart
from the experiment's own folders and the device), the same settings recorded when it ran
(:py:mod:`gcl_monai.benchmark.settings`; a run from before that record is compared on its overrides only) and the
same patients in every part of the split. Its folder is linked (or copied) into this experiment and its
``benchmark.json`` records where it came from.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from gcl_monai.benchmark.cells import pretrain_done, read_status, write_status
from gcl_monai.benchmark.experiment import PretrainCell
from gcl_monai.benchmark.settings import IGNORED_KEYS, SETTINGS_KEY, cell_settings, changed_settings

__all__ = ["find_reusable", "import_pretraining", "same_split"]

logger = logging.getLogger("gcl_monai.benchmark")


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
    The finished pre-training of ``cell.method`` in the experiment folder ``source`` if it is the same run as
    ``cell`` (else None), and the reason in words.
    """
    plan_path = Path(source) / "plan.json"
    if not plan_path.exists():
        return None, f"{source} holds no plan.json"
    stored = json.loads(plan_path.read_text()).get("pretrain", {}).get(cell.method)
    if stored is None:
        return None, f"{source} has no pre-training of {cell.method}"
    # the stored folders are those of the run; the experiment folder may have moved since
    folders = {"work_dir": str(source), "split_file": str(Path(source) / Path(stored["overrides"]["split_file"]).name)}
    other = PretrainCell(cell.method, Path(stored["bundle"]), {**stored["overrides"], **folders},
                         stored.get("config", "pretrain"))
    if other.config != cell.config:
        return None, f"{source}'s pre-training of {cell.method} ran {other.config}.json, not {cell.config}.json"
    theirs, ours = _settings(other.overrides), _settings(cell.overrides)
    if theirs != ours:
        differ = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        return None, f"{source}'s pre-training of {cell.method} has other settings ({', '.join(differ)})"
    if not Path(other.overrides["split_file"]).exists():
        return None, f"{source} holds no {Path(other.overrides['split_file']).name}"
    if not same_split(Path(other.overrides["split_file"]), Path(cell.overrides["split_file"])):
        return None, f"{source} split the patients differently"
    if not pretrain_done(other):
        return None, f"{source}'s pre-training of {cell.method} has not finished"
    recorded = read_status(other.folder).get(SETTINGS_KEY)
    if recorded is not None and (differ := changed_settings(recorded, cell_settings(cell))):
        return None, f"{source}'s pre-training of {cell.method} ran with other bundle settings ({', '.join(differ)})"
    return other, f"the same pre-training ({read_status(other.folder)['status']}) in {source}"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def import_pretraining(cell: PretrainCell, sources: list[Path]) -> Path | None:
    """
    Fills ``cell.folder`` with the first reusable pre-training among the experiment folders ``sources``
    (:py:func:`find_reusable`). Nothing is taken when ``cell.folder`` already exists: a run of this experiment's
    own (finished or interrupted) is never replaced.

    Returns:
        the folder taken (the caller logs it), or None; each source not taken is logged with its reason.
    """
    if cell.folder.exists():
        return None
    for source in sources:
        other, reason = find_reusable(cell, source)
        if other is None:
            logger.info("pretrain %s: not taken from %s: %s.", cell.method, source, reason)
            continue
        partial = cell.folder.with_name(cell.folder.name + ".importing")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(other.folder, partial, copy_function=_link_or_copy)
        os.replace(partial, cell.folder)
        write_status(cell.folder, {**read_status(other.folder), "reused_from": str(other.folder)})
        return other.folder
    return None
