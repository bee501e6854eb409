"""
An experiment of the benchmark and its cells: which dataset, preset and folders, and one cell per pre-training or
fine-tuning run, each a ``monai.bundle.run`` of a bundle config with overrides.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcl_monai.benchmark.bundles import default_bundle_dir
from gcl_monai.benchmark.presets import Preset

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

    def bundle(self, dataset: str) -> Path:
        return Path(self.bundle_dir) / DATASETS[dataset][0]

    def split_file(self, dataset: str) -> Path:
        return self.folder / ("split.json" if dataset == self.data else f"split_{dataset}.json")

    def overrides(self, dataset: str) -> dict[str, Any]:
        """Overrides shared by every bundle run on ``dataset``: folders, split file, device and ``preset.common``."""
        subdir = DATASETS[dataset][1]
        out: dict[str, Any] = {
            "bundle_root": str(self.bundle(dataset)),
            "work_dir": str(self.folder),
            "split_file": str(self.split_file(dataset)),
        }
        if subdir is not None:
            out["dataset_dir"] = str(Path(self.data_root) / subdir)
        if self.preset.device is not None:
            out["device"] = f"$torch.device({self.preset.device!r})"
        out.update(self.preset.common)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "data": self.data,
            "pretrain_data": self.source,
            "data_root": str(self.data_root),
            "results_dir": str(self.results_dir),
            "bundle_dir": str(self.bundle_dir),
            "test_root": None if self.test_root is None else str(self.test_root),
            "input_grid": self.input_grid,
            "preset": dataclasses.asdict(self.preset),
        }


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


def pretrain_name(method: str, seed: int) -> str:
    """The name of a method's pre-training with ``seed``: the method for seed 0, ``<method>_p<seed>`` else."""
    return method if seed == 0 else f"{method}_p{seed}"


@dataclass
class FinetuneCell:
    """One fine-tuning run (method, L, labelled draw, seed, pre-training seed) and its evaluations, one per test
    set; ``pretrain_seed`` is None for a method without pre-training."""

    method: str
    num_labeled: int
    draw: int
    seed: int
    repeat: int
    bundle: Path
    train_overrides: dict[str, Any]
    eval_overrides: dict[str, dict[str, Any]]
    pretrain: PretrainCell | None
    pretrain_seed: int | None = None

    @property
    def folder(self) -> Path:
        return Path(self.train_overrides["output_dir"])

    @property
    def label(self) -> str:
        return f"finetune {self.folder.name}"

    def dice_file(self, test_set: str) -> Path:
        return Path(self.eval_overrides[test_set]["eval_dir"]) / "dice.json"

    def finished(self) -> bool:
        return all(self.dice_file(t).exists() for t in self.eval_overrides)
