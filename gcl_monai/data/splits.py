"""Patient-level data splits (pre-training / fine-tuning train / validation / test), labelled subsets
of the fine-tuning pool, and their JSON files.

Splits are always by patient: every volume (and therefore every slice) of a patient lands in the
same split, so no patient's anatomy leaks between pre-training, training and evaluation.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gcl_monai.utils import atomic_write

logger = logging.getLogger("gcl_monai.data")

SPLIT_NAMES = ("pretrain", "train", "val", "test")


def _patient(item: dict) -> str:
    if "patient" in item:
        return str(item["patient"])
    if "patient_id" in item:
        return str(item["patient_id"])
    raise ValueError(f"Datalist entry has neither 'patient' nor 'patient_id': {item.get('image', item)!r}.")


def _count(value: int | float, total: int, name: str) -> int:
    """A count, or a fraction in [0, 1] of ``total`` (rounded)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be an int count or a float fraction, got {value!r}.")
    if isinstance(value, (float, np.floating)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} as a fraction must be in [0, 1], got {value}.")
        return int(round(value * total))
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}.")
    return int(value)


def _strata(datalist: Sequence[dict], patients: list[str], key: str | None) -> dict[str, str] | None:
    """``patient -> stratum`` when every entry has ``key`` (consistent per patient), else None."""
    if key is None or any(key not in d for d in datalist):
        if key is not None:
            logger.debug("Split not stratified: %r is missing in some entries.", key)
        return None
    strata: dict[str, str] = {}
    for d in datalist:
        p, value = _patient(d), str(d[key])
        if strata.setdefault(p, value) != value:
            raise ValueError(f"Patient {p!r} has several {key!r} values: {strata[p]!r} and {value!r}.")
    return {p: strata[p] for p in patients}


def _patient_order(patients: list[str], strata: dict[str, str] | None, rng: np.random.Generator) -> list[str]:
    """Random order of ``patients``; stratified orders interleave the strata evenly, so any
    contiguous run of the order holds each stratum in proportion (within one patient)."""
    if strata is None:
        return [patients[i] for i in rng.permutation(len(patients))]
    position = {}
    for stratum in sorted(set(strata.values())):
        members = [p for p in patients if strata[p] == stratum]
        offset = rng.random()
        for rank, i in enumerate(rng.permutation(len(members))):
            position[members[i]] = (rank + offset) / len(members)
    return sorted(patients, key=lambda p: position[p])


def split_patients(
    datalist: Sequence[dict],
    num_pretrain: int | float,
    num_val: int | float,
    num_test: int | float,
    seed: int = 0,
    stratify_key: str | None = "group",
) -> dict[str, list[dict]]:
    """Split a datalist by patient into pre-training, fine-tuning train, validation and test sets.

    The paper splits each dataset into a pre-training set and a fine-tuning set, the latter into
    train / validation / test; the patients left after pre-training, validation and test form the
    fine-tuning train pool (``"train"``), from which :func:`labeled_subset` draws labelled cases.

    Args:
        datalist: datalist entries with ``"patient"`` (or ``"patient_id"``).
        num_pretrain: number of pre-training patients, or a fraction (float in [0, 1]) of all patients.
        num_val: number (or fraction) of validation patients.
        num_test: number (or fraction) of test patients.
        seed: random seed; the same datalist and seed always give the same split, whatever the
            order of the datalist.
        stratify_key: entry key to stratify by (ACDC ``"group"``), so each split holds each stratum in
            proportion; ignored when some entry lacks it; None for no stratification.

    Returns:
        ``{"pretrain", "train", "val", "test"}`` -> datalist entries, in their input order.

    Raises:
        ValueError: when the counts exceed the number of patients, or a patient has several
            stratum values.
    """
    patients = sorted({_patient(d) for d in datalist})
    total = len(patients)
    counts = {
        name: _count(value, total, name)
        for name, value in (("num_pretrain", num_pretrain), ("num_val", num_val), ("num_test", num_test))
    }
    if sum(counts.values()) > total:
        raise ValueError(f"Split counts {counts} (sum {sum(counts.values())}) exceed the {total} patients.")
    order = _patient_order(patients, _strata(datalist, patients, stratify_key), np.random.default_rng(seed))
    bounds = np.cumsum([0, counts["num_pretrain"], counts["num_val"], counts["num_test"]])
    assignment = {p: "train" for p in order[bounds[-1] :]}
    for name, start, stop in zip(("pretrain", "val", "test"), bounds[:-1], bounds[1:]):
        assignment.update({p: name for p in order[start:stop]})
    split: dict[str, list[dict]] = {name: [] for name in SPLIT_NAMES}
    for d in datalist:
        split[assignment[_patient(d)]].append(d)
    logger.info(
        "Patient split (seed %d): %s patients.", seed, {n: len({_patient(d) for d in split[n]}) for n in SPLIT_NAMES}
    )
    return split


def _draw_patients(num_patients: int, num_labeled: int, draw: int, seed: int) -> frozenset[int]:
    """Indices of the patients of draw ``draw``: disjoint subsets within each round of
    ``num_patients // num_labeled`` draws, and no repeated subset while unused ones remain."""
    per_round = num_patients // num_labeled
    possible = math.comb(num_patients, num_labeled)
    seen: set[frozenset[int]] = set()
    for i in range(draw + 1):
        round_index, j = divmod(i, per_round)
        perm = np.random.default_rng([seed, num_labeled, round_index]).permutation(num_patients)
        subset = frozenset(int(k) for k in perm[j * num_labeled : (j + 1) * num_labeled])
        retry = np.random.default_rng([seed, num_labeled, round_index, j])
        while subset in seen and len(seen) < possible:
            subset = frozenset(int(k) for k in retry.choice(num_patients, num_labeled, replace=False))
        seen.add(subset)
    return subset


#: the patients a labelled draw may come from: the fine-tuning pool only, or the pool and the pre-training patients.
LABELED_POOLS = ("train", "train+pretrain")


def labeled_pool(split: dict[str, list[dict]], pool: str = "train") -> list[dict]:
    """The entries from which :func:`labeled_subset` draws the labelled patients.

    ``"train"`` is the fine-tuning pool, disjoint from the pre-training patients. ``"train+pretrain"`` adds the
    pre-training patients, as in the paper, where the pre-training uses every training volume without its label and
    the L labelled volumes come from the same training set: with a small pool (8 patients on ACDC and prostate here)
    it gives more distinct labelled draws.

    Raises:
        ValueError: for another ``pool``, naming it and the choices.
    """
    if pool not in LABELED_POOLS:
        raise ValueError(f"labeled_pool must be one of {LABELED_POOLS}, got {pool!r}.")
    return list(split["train"]) + (list(split["pretrain"]) if pool == "train+pretrain" else [])


def labeled_subset(train: Sequence[dict], num_labeled: int, draw: int, seed: int = 0) -> list[dict]:
    """The labelled cases of one fine-tuning run: ``num_labeled`` PATIENTS of the train pool.

    ``L`` counts patients, not volumes: a labelled ACDC patient contributes both its ED and ES
    frames. The subset depends only on the pool's patients and ``(num_labeled, draw, seed)``, never
    on the method being compared. Draws ``0, 1, 2, ...`` are disjoint as long as the pool allows
    (``draw < P // L``), then remain pairwise distinct while unused subsets exist.

    Args:
        train: the fine-tuning train pool (e.g. ``split_patients(...)["train"]``).
        num_labeled: number of labelled patients ``L`` (1 <= L <= number of patients).
        draw: index of the repetition (0, 1, 2, ...).
        seed: random seed.

    Returns:
        The entries of the drawn patients, in their input order.

    Raises:
        ValueError: when ``num_labeled`` is out of range or ``draw`` is negative.
    """
    patients = sorted({_patient(d) for d in train})
    if not 1 <= num_labeled <= len(patients):
        raise ValueError(f"num_labeled must be in 1..{len(patients)} (patients in the pool), got {num_labeled}.")
    if draw < 0:
        raise ValueError(f"draw must be >= 0, got {draw}.")
    chosen = {patients[i] for i in _draw_patients(len(patients), num_labeled, draw, seed)}
    return [d for d in train if _patient(d) in chosen]


def unlabeled_subset(pool: Sequence[dict], labeled: Sequence[dict]) -> list[dict]:
    """The unlabelled cases of a semi-supervised fine-tuning run: the entries of ``pool`` whose patient is not
    among the labelled ones, without their ``label`` (:func:`without_labels`).

    Args:
        pool: the training patients' entries (e.g. ``split["pretrain"] + split["train"]``).
        labeled: the labelled entries (e.g. :func:`labeled_subset`'s output).

    Returns:
        The unlabelled entries, in their input order, without their labels.

    Raises:
        ValueError: when every patient of ``pool`` is labelled (nothing left for a consistency loss).
    """
    labeled_patients = {_patient(d) for d in labeled}
    unlabeled = [d for d in pool if _patient(d) not in labeled_patients]
    if not unlabeled:
        raise ValueError(
            f"no unlabelled slices left: all {len({_patient(d) for d in pool})} training patients are labelled "
            f"({sorted(labeled_patients)}); a semi-supervised fine-tuning needs unlabelled patients."
        )
    return without_labels(unlabeled)


def without_labels(entries: Sequence[Mapping]) -> list[dict]:
    """``entries`` without their ``label`` key: the volumes of a path that uses the images alone (pre-training, the
    unlabelled cases of a semi-supervised fine-tuning), so that a volume pipeline written for image and label
    (``allow_missing_keys``) loads no label there."""
    return [{k: v for k, v in entry.items() if k != "label"} for entry in entries]


def _to_json(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"Cannot store {type(value).__name__} {value!r} in a split file.")


def save_split(split: Mapping[str, Sequence[dict]], path: str | Path) -> Path:
    """Write a split (``name -> datalist entries``) as JSON, so every compared method uses it.

    Args:
        split: e.g. the output of :func:`split_patients`, possibly with labelled subsets added.
        path: the JSON file to write (parent folders are created). It appears whole: written beside it under a name
            of this process, then moved over it, so runs that start together and each write the same split never
            read a part of it.

    Returns:
        The path written.
    """
    path = Path(path)
    with atomic_write(path) as partial:
        partial.write_text(json.dumps({k: list(v) for k, v in split.items()}, indent=1, default=_to_json))
    return path


def load_split(path: str | Path) -> dict[str, list[dict]]:
    """Read a split written by :func:`save_split`.

    Raises:
        FileNotFoundError: when the file is missing.
        ValueError: when it is not a JSON mapping of names to lists of dicts.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Split file {str(path)!r} does not exist.")
    try:
        split = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: malformed split JSON ({exc}).") from exc
    if not isinstance(split, dict) or not all(
        isinstance(v, list) and all(isinstance(d, dict) for d in v) for v in split.values()
    ):
        raise ValueError(f"{path}: expected a mapping of split names to lists of datalist entries.")
    return split
