"""
An experiment of the benchmark as asked for (which datasets, preset and folders) and the records of its cells, one
per pre-training or fine-tuning run, each a ``monai.bundle.run`` of a bundle config with overrides. The cells are
made by :py:mod:`experiments.plan`, from the experiment alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.bundles import bundle_config, default_bundle_dir
from experiments.presets import Preset

__all__ = [
    "DATASETS",
    "EXTERNAL_TEST",
    "INPUT_GRID_SETS",
    "INTERNAL_TEST",
    "Experiment",
    "FinetuneCell",
    "PretrainCell",
    "pretrain_name",
]

#: dataset id -> (bundle folder, dataset sub-folder of the data root; None: the bundle generates its data).
DATASETS: dict[str, tuple[str, str | None]] = {
    "acdc": ("gcl_acdc", "acdc"),
    "prostate": ("gcl_prostate", "prostate"),
    "mmwhs": ("gcl_mmwhs", "mmwhs"),
    "demo": ("gcl_demo", None),
}
INTERNAL_TEST = "test"
EXTERNAL_TEST = "external"
#: the test sets of ``input_grid``: name -> the split evaluated (``evaluate.json``'s ``test_split``), Dice in each
#: volume's own grid (``dice_grid`` ``input``) instead of the network's cropped and resized one
INPUT_GRID_SETS: dict[str, str] = {"test_input": "test", "val_input": "val"}


@dataclass
class Experiment:
    """
    One benchmark experiment.

    Args:
        name: experiment name (its folder under ``results_dir``).
        data: dataset of fine-tuning and test (a key of :py:data:`DATASETS`).
        preset: the protocol (methods, L, repeats, overrides).
        data_root: folder holding the datasets' folders.
        results_dir: parent folder of the experiments.
        bundle_dir: folder of the ``gcl_<data>`` bundles.
        pretrain_data: dataset of pre-training (None: ``data``); another dataset is the out-of-distribution setting.
        test_root: folder of an external test set in the layout of ``data`` (evaluated on all its patients).
        input_grid: also evaluate every fine-tuned model on the test and the validation patients in each volume's
            own grid (:py:data:`INPUT_GRID_SETS`): a Dice that does not depend on the field of view or the image
            size, so that runs differing in them compare.
    """

    name: str
    data: str
    preset: Preset
    data_root: Path = Path("data")
    results_dir: Path = Path("results")
    bundle_dir: Path = field(default_factory=default_bundle_dir)
    pretrain_data: str | None = None
    test_root: Path | None = None
    input_grid: bool = False

    def __post_init__(self) -> None:
        for dataset in (self.data, self.source):
            if dataset not in DATASETS:
                raise ValueError(f"unknown dataset {dataset!r}; choose from {list(DATASETS)}.")

    @property
    def source(self) -> str:
        """The pre-training dataset."""
        return self.pretrain_data or self.data

    @property
    def folder(self) -> Path:
        return Path(self.results_dir) / self.name


@dataclass
class PretrainCell:
    """
    The pre-training of one method with one seed (shared by all its fine-tuning cells): a run of the bundle's
    ``pretrain.json``, or, for a supervised pre-training, of its ``train.json`` whose model's encoder is then exported.
    Seed 0 keeps the method's own folder name (the experiments run before pre-training seeds existed); seed s > 0 is
    ``<method>_p<s>``.
    """

    method: str
    bundle: Path
    overrides: dict[str, Any]
    config: str = "pretrain"
    seed: int = 0

    @property
    def name(self) -> str:
        """The run's name: its folder under ``pretrain/`` and its key in ``plan.json``."""
        return pretrain_name(self.method, self.seed)

    @property
    def folder(self) -> Path:
        return Path(self.overrides["work_dir"]) / "pretrain" / self.name

    @property
    def label(self) -> str:
        return f"pretrain {self.name}"

    def config_value(self, key: str) -> Any:
        """The value of the config item ``key`` that the run gets: its override, else the bundle config's."""
        return self.overrides[key] if key in self.overrides else bundle_config(self.bundle, self.config)[key]


def pretrain_name(method: str, seed: int) -> str:
    """The name of a method's pre-training with ``seed``: the method for seed 0, ``<method>_p<seed>`` else."""
    return method if seed == 0 else f"{method}_p{seed}"


@dataclass
class FinetuneCell:
    """
    One fine-tuning run (method, L, labelled draw, seed, pre-training seed) and its evaluations, one per test set:
    everything its run and its rows of ``results.csv`` need. ``pretrain``, ``pretrain_dataset`` and
    ``pretrain_seed`` are None for a method without pre-training.
    """

    method: str
    num_labeled: int
    draw: int
    seed: int
    repeat: int
    bundle: Path
    train_overrides: dict[str, Any]
    eval_overrides: dict[str, dict[str, Any]]
    pretrain: PretrainCell | None
    dataset: str
    pretrain_dataset: str | None
    preset: str
    pretrain_seed: int | None = None

    @property
    def folder(self) -> Path:
        return Path(self.train_overrides["output_dir"])

    @property
    def label(self) -> str:
        return f"finetune {self.folder.name}"

    def dice_file(self, test_set: str) -> Path:
        return Path(self.eval_overrides[test_set]["eval_dir"]) / "dice.json"
