"""
What a cell was run with: the bundle config's literal hyperparameters overlaid with the cell's overrides, recorded
in the cell's ``benchmark.json`` when it runs and compared with today's plan before a rerun takes the cell as done.

A finished cell is skipped by a rerun. Without this record, a cell trained before a bundle default changed (e.g.
``shrink_perturb`` in ``train.json``) would be taken as a run of today's recipe, and an experiment would silently
mix two recipes in one row. The record holds every top-level item of the config whose value is a JSON literal
(numbers, booleans, strings that are not expressions or references, lists of them), then the overrides; the
folders of the experiment and the device are left out (:py:data:`IGNORED_KEYS`), as they change where a run is
written or only its rounding, not what it trains. Changes inside expressions (a new transform chain) are not
seen: the record is of the recipe's settings, not of the code.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from experiments.bundles import bundle_config
from experiments.experiment import FinetuneCell, PretrainCell

__all__ = [
    "ADDED_LATER",
    "IGNORED_KEYS",
    "IGNORED_PREFIXES",
    "PRETRAIN_SETTINGS_KEY",
    "SETTINGS_KEY",
    "cell_settings",
    "changed_settings",
    "recorded_changes",
    "run_settings",
    "setting_differences",
]

#: the key of the record in a cell's ``benchmark.json``.
SETTINGS_KEY = "settings"
#: the key, in a fine-tuning cell's ``benchmark.json``, of the settings of the pre-training whose encoder it loaded:
#: a pre-training run again with other settings makes its fine-tuning cells stale too.
PRETRAIN_SETTINGS_KEY = "pretrain_settings"

#: overrides that differ between experiments or folders without changing what is trained: where the experiment,
#: its data, bundle and checkpoints are, the device (which changes only the rounding) and ``batched_augmentation``
#: (the fine-tuning's augmentation drawn and applied for the whole batch at once: the same distribution as the
#: per-slice transforms, tests/transforms/test_batch_augmentation.py; only the stream of random numbers differs, as
#: it does from one fine-tuning seed to the next), so that a GPU run's later sessions may use it beside cells
#: fine-tuned per slice; ``config_files``, the configs a run stacks (``train.json``'s names it, for the check of
#: ``evaluate.json`` on top of it), not a setting; ``resume`` and ``checkpoint_interval``, whether a fine-tuning
#: continues from its last checkpoint and how often it writes one (a resumed run continues bit for bit on CPU:
#: tests/bundles/test_bundles.py); ``channels_last``, the memory layout of the network's weights (the same float32
#: arithmetic in another order, like the device: docs/results/speed.md).
IGNORED_KEYS = (
    "config_files",
    "bundle_root",
    "work_dir",
    "dataset_dir",
    "split_file",
    "output_dir",
    "ckpt_dir",
    "ckpt_path",
    "eval_dir",
    "pretrained_path",
    "device",
    "batched_augmentation",
    "resume",
    "checkpoint_interval",
    "channels_last",
)

#: settings added to the bundles after cells were first recorded, with the value that a run before them had (the
#: behaviour the new switch keeps by default): a record without the key is read with it, so that adding a switch
#: does not make every recorded cell stale. Add an entry with every new top-level literal of a bundle config.
ADDED_LATER: dict[str, Any] = {
    "labeled_pool": "train",
    "fov_shape": "scaled",
    "rotate_degrees": 15.0,
    "scale_range": 0.1,
    "affine_prob": 0.5,
    "dice_batch": False,
    "keep_largest_component": False,
    "float32_matmul_precision": "highest",
    "slices_per_patient": 1,
    "elastic_prob": 0.0,
    "contrast_prob": 0.3,
    "noise_prob": 0.3,
    "elastic_spacing": [24, 24],
    "elastic_magnitude": [0.5, 1.5],
    "amp": False,
    "grid": "resize",
    "pixel_spacing": 1.4,
}

#: settings that never change what is trained: the frozen-encoder probe of a pre-training (``probe_*``, its handler
#: draws no random number and changes no weight: tests/probe)
IGNORED_PREFIXES = ("probe_",)

_EXPRESSION_PREFIXES = ("$", "@", "%")


def _literal(value: Any) -> bool:
    """A JSON literal of the config: not an expression, a reference, a macro or a component."""
    if isinstance(value, str):
        return not value.startswith(_EXPRESSION_PREFIXES)
    if isinstance(value, (list, tuple)):
        return all(_literal(v) for v in value)
    return value is None or isinstance(value, (bool, int, float))


def run_settings(bundle: Path, config: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """
    The settings of a run of ``<bundle>/configs/<config>.json`` with ``overrides``: the config's literal top-level
    items, then the overrides (JSON round-tripped, so that tuples and lists compare equal), without
    :py:data:`IGNORED_KEYS` and the keys of :py:data:`IGNORED_PREFIXES`.
    """
    defaults = {k: v for k, v in bundle_config(bundle, config).items() if _literal(v)}
    merged = {**defaults, **overrides}
    kept = {k: merged[k] for k in sorted(merged) if k not in IGNORED_KEYS and not k.startswith(IGNORED_PREFIXES)}
    return json.loads(json.dumps(kept))


def changed_settings(recorded: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """
    The keys whose value differs between a recorded settings record and today's (one side missing counts as
    different, except a key of :py:data:`ADDED_LATER` missing from the record, which is read as its value there).
    """
    return _differing(_with_added_later(recorded, ours), ours)


def _differing(recorded: Mapping[str, Any], ours: Mapping[str, Any]) -> list[str]:
    """The keys whose value differs between two complete records (one side missing counts as different)."""
    missing = object()
    return sorted(k for k in set(recorded) | set(ours) if recorded.get(k, missing) != ours.get(k, missing))


def _with_added_later(recorded: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, Any]:
    """``recorded`` with the :py:data:`ADDED_LATER` keys it lacks (and today's settings have) at their old value."""
    return {**{k: v for k, v in ADDED_LATER.items() if k in ours}, **recorded}


def cell_settings(cell: PretrainCell | FinetuneCell) -> dict[str, Any]:
    """The settings of a cell's training run (:py:func:`run_settings` of its ``pretrain.json`` or ``train.json``)."""
    if isinstance(cell, PretrainCell):
        return run_settings(cell.bundle, cell.config, cell.overrides)
    return run_settings(cell.bundle, "train", cell.train_overrides)


def recorded_changes(
    status: Mapping[str, Any], cell: PretrainCell | FinetuneCell
) -> dict[str, list[tuple[str, Any, Any]]]:
    """
    What differs between the settings recorded in a status file and what the plan gives ``cell`` today: under
    :py:data:`SETTINGS_KEY` (the cell's own run) and, for a fine-tuning cell, :py:data:`PRETRAIN_SETTINGS_KEY` (the
    pre-training whose encoder it loaded), each a list of ``(key, recorded value, today's value)``, ``"(absent)"``
    for a missing value. A record the status does not hold is not compared (no entry).
    """
    runs: list[tuple[str, PretrainCell | FinetuneCell]] = [(SETTINGS_KEY, cell)]
    if isinstance(cell, FinetuneCell) and cell.pretrain is not None:
        runs.append((PRETRAIN_SETTINGS_KEY, cell.pretrain))
    changes = {}
    for record, run in runs:
        if record in status:
            changes[record] = setting_differences(status[record], cell_settings(run))
    return changes


def setting_differences(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """
    ``(key, first's value, second's value)`` for each key that differs between two settings records, ``"(absent)"``
    for a missing value; a key of :py:data:`ADDED_LATER` missing from one record and present in the other is read
    at its old value, as in :py:func:`changed_settings`.
    """
    a = _with_added_later(first, second)
    b = _with_added_later(second, a)
    return [(k, a.get(k, "(absent)"), b.get(k, "(absent)")) for k in _differing(a, b)]
