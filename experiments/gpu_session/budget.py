"""
The sizes of each step of ``gpu-run``: the paper's budget, the default that fits two 15-minute sessions
(:py:mod:`~experiments.gpu_session.sessions` and docs/gpu_run.md give the predicted time of each step), and the
rehearsal's tiny sizes on a CPU.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from experiments.gpu_session.state import STEPS
from experiments.presets import PAPER, Preset

__all__ = ["BUDGETS", "GpuRunBudget", "get_budget"]

#: the fine-tuning of the comparison: the paper's (batch 5, Adam 1e-4, cosine, one pass over the labelled slices per
#: epoch), labelled patients drawn from every training patient as in the paper (so that 6 draws at L = 2 are
#: disjoint), validated every ``val_interval`` epochs instead of every epoch
_FINETUNE = {**PAPER.finetune, "labeled_pool": "train+pretrain"}
_METHODS = ("random", "simclr", "gcl")


@dataclass(frozen=True)
class GpuRunBudget:
    """
    What each step of ``gpu-run`` runs.

    Args:
        name: budget id (``--budget``).
        device: torch device of every step.
        common: overrides of every bundle run (feature sizes, image size, split sizes).
        pretrain: overrides of ``pretrain.json`` (the paper's recipe and its number of epochs).
        finetune: overrides of ``train.json`` (the paper's fine-tuning, its epochs and ``val_interval``).
        num_labeled: the values of L.
        repeats: paired labelled draws per L.
        jobs: cells running at once on the one device (two pre-trainings side by side, fine-tuning cells).
        diagnose_iterations: iterations of the diagnosis of the default recipe.
        speed: arguments of ``benchmarks.bench_pretrain_iteration`` (the device and ``--out`` are added).
        phantom_patients: a synthetic ACDC-layout dataset of this many patients when no real data is given (0: real
            data is required).
        stop_on_verdict: a diagnosis verdict of collapse or stall ends the run (the rehearsal's few iterations give
            no verdict worth stopping for: it records it and goes on).
        methods: the methods compared.
        pretrain_seed: the seed of every pre-training (:py:meth:`with_pretrain_seed`).
        steps: the steps run (:py:data:`~experiments.gpu_session.state.STEPS`; the others are recorded as
            skipped).
    """

    name: str
    device: str
    common: Mapping[str, Any]
    pretrain: Mapping[str, Any]
    finetune: Mapping[str, Any]
    num_labeled: tuple[int, ...] = (1, 2)
    repeats: int = 6
    jobs: int = 8
    diagnose_iterations: int = 300
    speed: tuple[str, ...] = ()
    phantom_patients: int = 0
    stop_on_verdict: bool = True
    methods: tuple[str, ...] = field(default=_METHODS)
    pretrain_seed: int = 0
    steps: tuple[str, ...] = STEPS

    def with_pretrain_seed(self, seed: int) -> GpuRunBudget:
        """
        The same comparison from pre-training seed ``seed`` (> 0), named ``<name>-p<seed>``: the pre-trained methods
        only, on the same labelled draws and fine-tuning seeds (random initialisation has no pre-training seed: its
        cells are seed 0's), the comparison step alone (the speed and the diagnosis were measured with seed 0). Its
        rows join seed 0's in one analysis (``protocol --with``).
        """
        if seed < 1:
            raise ValueError(f"a further pre-training seed is >= 1, got {seed}.")
        return self.replace(
            name=f"{self.name}-p{seed}",
            methods=tuple(m for m in self.methods if m != "random"),
            pretrain_seed=seed,
            steps=("compare",),
        )

    def preset(self) -> Preset:
        """The harness preset of the comparison (pre-training and fine-tuning) under this budget."""
        return PAPER.replace(
            name=f"gpu-{self.name}",
            methods=self.methods,
            pretrain_seeds=(self.pretrain_seed,),
            num_labeled=self.num_labeled,
            repeats=self.repeats,
            common=dict(self.common),
            pretrain=dict(self.pretrain),
            finetune=dict(self.finetune),
            device=self.device,
        )

    def diagnose_overrides(self) -> dict[str, Any]:
        """Bundle overrides of the diagnosis: the comparison's GCL pre-training (the bundle's default recipe)."""
        return {**self.common, **self.pretrain}

    def replace(self, **changes: Any) -> GpuRunBudget:
        return dataclasses.replace(self, **changes)


def _speed_args(iterations: int, warmup: int, loader_patients: int) -> tuple[str, ...]:
    """``benchmarks.bench_pretrain_iteration`` arguments at the paper's batch and width, with the fine-tuning
    iteration timed on the device (``--finetune-on-device``)."""
    return (
        "--batch-size",
        "48",
        "--features",
        *("32", "64", "128", "256", "512", "32"),
        "--iterations",
        str(iterations),
        "--warmup",
        str(warmup),
        "--loader-patients",
        str(loader_patients),
        "--finetune-on-device",
    )


_PAPER_SPEED = _speed_args(iterations=20, warmup=5, loader_patients=24)
#: loader workers of each pre-training (two side by side): the 16 cores of the session's machine shared (the bundles'
#: default gives each run min(8, cores)); the pre-training draws its two views on the GPU (``views_on_device``: the
#: same augmentation distribution, 0.03 instead of 0.94 core-seconds of loader work per batch of 48,
#: docs/gpu_run.md). Each fine-tuning cell keeps its labelled slices on the GPU and augments them there
#: (``data_on_device``: the same batches' distribution, no loader worker) as one batch (``batched_augmentation``:
#: the same transforms and parameter distributions, drawn and applied for the whole batch at once, no loop over its
#: slices: docs/gpu_run.md), reads no value per iteration (``decollate`` off, the loss logged every
#: ``log_interval`` iterations) and validates without workers (its volumes are cached).
_DEVICE_FINETUNE = {"data_on_device": True, "batched_augmentation": True, "decollate": False, "log_interval": 25}
_GPU_LOADERS = {
    "pretrain": {"num_workers": 4, "views_on_device": True},
    "finetune": {"num_workers": 0, **_DEVICE_FINETUNE},
}
#: the acdc bundle probes its encoder after the last epoch (docs/probe.md), on the CPU: not within the session; the
#: finished encoders come back exact and are probed afterwards (python -m gcl_monai.probe)
_NO_PROBE = {"probe_interval": 0}
_PAPER = GpuRunBudget(
    name="paper",
    device="cuda:0",
    common=PAPER.common,
    pretrain={**PAPER.pretrain, **_GPU_LOADERS["pretrain"], **_NO_PROBE},
    finetune={**_FINETUNE, "val_interval": 25, **_GPU_LOADERS["finetune"]},
    speed=_PAPER_SPEED,
)
#: the default: the paper's recipes, the pre-training cut to 80 of its 300 epochs, so that the speed benchmark, the
#: diagnosis and both pre-trainings end within one 15-minute session of an H100 and the fine-tuning within a second
#: one (:py:mod:`~experiments.gpu_session.sessions`, docs/gpu_run.md "Predicted time")
_DEFAULT = _PAPER.replace(
    name="default",
    pretrain={**_PAPER.pretrain, "epochs": 80},
    speed=_speed_args(iterations=10, warmup=3, loader_patients=12),
)
#: the rehearsal on a CPU: every step and code path at tiny sizes (a synthetic dataset of 12 patients at 32 x 32)
_REHEARSE = GpuRunBudget(
    name="rehearse",
    device="cpu",
    common={
        "image_size": [32, 32],
        "features": [4, 4, 8, 8, 16, 4],
        "num_pretrain": 4,
        "num_val": 2,
        "num_test": 2,
    },
    pretrain={**PAPER.pretrain, "batch_size": 4, "epochs": 2, "views_on_device": True, **_NO_PROBE},
    finetune={**_FINETUNE, "epochs": 2, "val_interval": 1, **_DEVICE_FINETUNE, "log_interval": 2},
    num_labeled=(1, 2),
    repeats=1,
    jobs=2,
    diagnose_iterations=3,
    speed=(
        "--batch-size",
        "2",
        "--image-size",
        "32",
        "--features",
        "4",
        "4",
        "8",
        "8",
        "16",
        "4",
        "--iterations",
        "1",
        "--warmup",
        "0",
        "--loader-patients",
        "2",
        "--finetune-rounds",
        "1",
        "--finetune-on-device",
        "--skip-peak-rss",
        "--parts",
        "variants",
        "loader",
        "finetune",
    ),
    phantom_patients=12,
    stop_on_verdict=False,
)

BUDGETS: dict[str, GpuRunBudget] = {b.name: b for b in (_DEFAULT, _PAPER, _REHEARSE)}


#: a budget from a further pre-training seed: ``<budget>-p<seed>``
_SEEDED = re.compile(r"^(?P<base>.+)-p(?P<seed>\d+)$")


def get_budget(name: str) -> GpuRunBudget:
    """The budget called ``name``: one of :py:data:`BUDGETS`, or ``<budget>-p<seed>`` (its
    :py:meth:`~GpuRunBudget.with_pretrain_seed`)."""
    if name in BUDGETS:
        return BUDGETS[name]
    seeded = _SEEDED.match(name)
    if seeded and seeded["base"] in BUDGETS:
        return BUDGETS[seeded["base"]].with_pretrain_seed(int(seeded["seed"]))
    raise ValueError(f"unknown budget {name!r}; choose from {list(BUDGETS)}, or <budget>-p<seed>.")
