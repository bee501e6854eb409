"""
The predicted device time of ``gpu-run`` on an H100, lease by lease (``gpu-run --plan``): what each lease runs and
whether it fits the lending terms' device time (:py:data:`~gcl_monai.benchmark.gpu_run.terms.TERMS`), start-up
included. docs/gpu_run.md, "Predicted time", derives every constant below; in short:

- measured on an H100 at a0519ee (../shared/notes/gpu_paper_preset_acdc.md): a pre-training iteration of batch 48
  at the paper's width takes 0.022 s (SimCLR) and 0.112 s (full GCL);
- a pre-training epoch is 18.3 iterations (878 slices of the 48 pre-training patients over batch 48), its views
  drawn on the GPU for 5% more;
- a fine-tuning iteration (batch 5, paper-width U-Net) is 95.8 GFLOP: 3.4 ms at the 28.5 TFLOP/s the H100 reached
  on SimCLR, taken as 5 ms; its augmentation on the device (``data_on_device``) dispatches about 600 ATen
  operations per batch (docs/results/finetune_data_cpu.json), taken as 2 us of GPU time each;
- the fine-tuning cells share the GPU and run ``jobs`` at once; their host work (about 18 ms per iteration: the
  augmentation's 9 ms measured here plus 1 114 operations of the step at 7.5 us) leaves the GPU the bottleneck;
- a labelled ACDC patient gives about 20 slices (two frames), 4 batches of 5 per epoch;
- each cell's fixed costs (start, volumes, 12 validations, the test Dice): 15 s, ``jobs`` at once.

A pre-training cannot resume on another machine at the paper's width (its checkpoint and the pre-training patients
do not travel together: docs/gpu_run.md, "On a fresh machine"), so it must end within its lease; fine-tuning resumes
by cell, so its cells may go to the next lease.
"""

from __future__ import annotations

from dataclasses import dataclass

from gcl_monai.benchmark.gpu_run.budget import GpuRunBudget
from gcl_monai.benchmark.gpu_run.terms import TERMS, LendingTerms

__all__ = ["Lease", "format_plan", "plan_leases"]

#: machine start, installing the wheels, unpacking the ACDC payload (the device README: "a minute or more" to start)
START_S = 150.0
#: the ``speed`` step by budget, and the ``diagnose`` step (300 GCL iterations, reading 48 patients, start)
SPEED_S = {"default": 90.0, "paper": 120.0}
DIAGNOSE_S = 66.0
#: packing what comes back, per call, and the calls of a lease (10 minutes at most each)
PACK_S = 30.0
CALLS_PER_LEASE = 2
#: H100 seconds per pre-training iteration (batch 48, paper width) and iterations per epoch; views on the GPU: +5%
PRETRAIN_ITERATION_S = {"simclr": 0.022, "gcl": 0.112}
PRETRAIN_ITERATIONS_PER_EPOCH = 878 / 48
VIEWS_ON_DEVICE = 1.05
#: H100 GPU seconds per fine-tuning iteration: the step, and the augmentation's ~600 operations at 2 us
FINETUNE_STEP_S = 0.005
FINETUNE_AUGMENT_S = 600 * 2e-6
#: labelled slices per ACDC patient, and each fine-tuning cell's fixed seconds
SLICES_PER_PATIENT = 20
CELL_FIXED_S = 15.0
#: the share of a lease's device time kept free for what the prediction misses
MARGIN = 0.15


@dataclass(frozen=True)
class Lease:
    """One lease: its parts (what, predicted seconds), in order."""

    parts: tuple[tuple[str, float], ...]

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.parts)

    def fits(self, terms: LendingTerms = TERMS, margin: float = MARGIN) -> bool:
        """Whether the lease ends within the device time, ``margin`` of it kept free."""
        return self.seconds <= (1 - margin) * terms.device_seconds


def _finetune_seconds(budget: GpuRunBudget, methods: tuple[str, ...]) -> tuple[float, int]:
    """GPU seconds of the fine-tuning cells of ``methods`` (the GPU the bottleneck) and their number."""
    epochs = budget.finetune["epochs"]
    per_batch = budget.finetune["batch_size"]
    iterations = sum(
        epochs * -(-SLICES_PER_PATIENT * n // per_batch) * budget.repeats * len(methods) for n in budget.num_labeled
    )
    cells = len(methods) * len(budget.num_labeled) * budget.repeats
    return iterations * (FINETUNE_STEP_S + FINETUNE_AUGMENT_S) + cells * CELL_FIXED_S / budget.jobs, cells


def plan_leases(budget: GpuRunBudget) -> list[Lease]:
    """
    The leases of a GPU budget: the first runs the speed benchmark, the diagnosis, both pre-trainings side by side
    and the random-init cells beside them (which need no encoder); the second, on a fresh machine that the finished
    encoders reach with the carry, the cells of the pre-trained methods.
    """
    start_and_pack = [("machine start, wheels, data", START_S), ("packing", CALLS_PER_LEASE * PACK_S)]
    epochs = budget.pretrain["epochs"]
    pretrain = PRETRAIN_ITERATIONS_PER_EPOCH * epochs * sum(PRETRAIN_ITERATION_S.values()) * VIEWS_ON_DEVICE
    random_s, random_cells = _finetune_seconds(budget, ("random",))
    pretrained = tuple(m for m in budget.methods if m != "random")
    cells_s, cells = _finetune_seconds(budget, pretrained)
    first = Lease(
        (
            start_and_pack[0],
            ("speed", SPEED_S[budget.name]),
            ("diagnose", DIAGNOSE_S),
            (f"pre-training {' and '.join(PRETRAIN_ITERATION_S)}, {epochs} epochs", pretrain),
            (f"{random_cells} random-init cells beside it", random_s),
            start_and_pack[1],
        )
    )
    second = Lease((start_and_pack[0], (f"{cells} cells of {', '.join(pretrained)}", cells_s), start_and_pack[1]))
    return [first, second]


def format_plan(budget: GpuRunBudget, terms: LendingTerms = TERMS) -> str:
    """The plan as a Markdown table, one row per part, and each lease's total against the device time."""
    lines = [
        f"budget {budget.name}: predicted H100 seconds per lease",
        "",
        "| lease | part | seconds |",
        "|---|---|---|",
    ]
    for number, lease in enumerate(plan_leases(budget), start=1):
        lines += [f"| {number} | {what} | {seconds:.0f} |" for what, seconds in lease.parts]
        verdict = "fits" if lease.fits(terms) else "DOES NOT FIT"
        lines.append(
            f"| {number} | **total** | **{lease.seconds:.0f}** of {terms.device_seconds} "
            f"({lease.seconds / 60:.1f} min; {verdict} with {MARGIN:.0%} kept free) |"
        )
    return "\n".join(lines)
