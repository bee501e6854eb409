"""The data a bundle sets up before a run: the experiment's patient-level split file and, for the demo, the
synthetic dataset on demand."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from gcl_monai.data.layouts import detect_layout, load_datalist
from gcl_monai.data.phantom import generate_acdc_phantom
from gcl_monai.data.splits import load_split, save_split, split_patients

logger = logging.getLogger("gcl_monai.bundle")

__all__ = ["check_dataset_dir", "load_or_create_split", "ensure_phantom"]


def load_or_create_split(
    split_file: str | Path,
    dataset_dir: str | Path,
    dataset: str = "auto",
    num_pretrain: int | float = 0.5,
    num_val: int | float = 0.1,
    num_test: int | float = 0.2,
    seed: int = 0,
    meta_keys: Sequence[str] | None = None,
    stratify_key: str | None = "group",
    dataset_options: Mapping | None = None,
) -> dict[str, list[dict]]:
    """
    The experiment's patient-level split: read from ``split_file`` when it exists, otherwise built from the
    dataset folder with :py:func:`gcl_monai.data.split_patients` and written there. Every method of a
    comparison that points at the same ``split_file`` therefore uses the same patients. The dataset folder is
    read (and its layout checked) only when the split is created.

    Args:
        split_file: JSON file of the split.
        dataset_dir: dataset folder (any supported layout) or JSON datalist.
        dataset: dataset name or ``"auto"`` (see :py:func:`gcl_monai.data.load_datalist`).
        num_pretrain, num_val, num_test: patients (or fractions) of each split; the rest is the fine-tuning
            train pool.
        seed: seed of the split.
        meta_keys: meta labels that must exist in the datalist.
        stratify_key: stratification key (ACDC pathology group).
        dataset_options: passed to the dataset's reader (e.g. the DICOM reader's ``cache_dir``, ``phase_bins``).
    """
    split_file = Path(split_file)
    if split_file.exists():
        logger.info("Using the split in %s.", split_file)
        return load_split(split_file)
    datalist = load_datalist(dataset_dir, dataset=dataset, meta_keys=meta_keys, **(dataset_options or {}))
    split = split_patients(datalist, num_pretrain, num_val, num_test, seed=seed, stratify_key=stratify_key)
    save_split(split, split_file)
    logger.info("Wrote the split to %s.", split_file)
    return split


def check_dataset_dir(split_file: str | Path, dataset_dir: str | Path, dataset: str = "auto") -> None:
    """
    Checks the layout of the dataset folder before a run does any work (:py:func:`gcl_monai.data.detect_layout`),
    unless ``split_file`` exists: the split then names every file, and the folder is not read.

    Raises:
        ValueError, FileNotFoundError: as :py:func:`gcl_monai.data.detect_layout`.
    """
    if not Path(split_file).exists():
        detect_layout(dataset_dir, dataset)


def ensure_phantom(out_dir: str | Path, num_patients: int = 20, seed: int = 0, image_size: int = 128) -> str:
    """
    The synthetic ACDC-layout dataset in ``out_dir``, generated on the first call (a ``.complete`` marker is
    written last, so an interrupted generation is redone).

    Returns:
        the dataset folder, as a string for bundle configs.
    """
    out_dir = Path(out_dir)
    marker = out_dir / ".complete"
    expected = f"{num_patients} {seed} {image_size}"
    if not marker.exists() or marker.read_text() != expected:
        logger.info("Generating the synthetic cardiac dataset (%d patients) in %s.", num_patients, out_dir)
        generate_acdc_phantom(out_dir, num_patients=num_patients, seed=seed, image_size=(image_size, image_size))
        marker.write_text(expected)
    return str(out_dir)
