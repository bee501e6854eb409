"""
The predicted device time of ``gpu-run`` on an H100 or H200, session by session (``gpu-run --plan``): what each session
runs and whether it fits the session terms' device time (:py:data:`~experiments.gpu_session.terms.TERMS`),
start-up included. docs/gpu_run.md, "Predicted time", derives every constant below; in short:

- measured in the first session, on an H200 (2026-11-26, docs/results/gpu-default_acdc): the machine's start, the
  wheels, the data and the worker's start 110 s; the ``speed`` step 67 s; the ``diagnose`` step 86 s; the bare
  fine-tuning step (batch 5, paper width, slices on the device) 13.7 ms, 2.2 times the 6.2 ms predicted from FLOPs;
- measured on an H100 at a0519ee (../shared/notes/gpu_paper_preset_acdc.md): a pre-training iteration of batch 48
  at the paper's width takes 0.022 s (SimCLR) and 0.112 s (full GCL);
- a pre-training epoch is 18.3 iterations (878 slices of the 48 pre-training patients over batch 48), its views
  drawn on the GPU for 5% more;
- the fine-tuning cells overlap on the GPU: 8 cells at once, alone on an H100, advanced by one iteration per 6.8 ms
  in all (median of session 2's 15-second windows, their slices augmented on the device: ``python -m
  experiments.gpu_session.session_rates``, docs/results/gpu-default_acdc/lease2_finetune_rates.csv), against one
  process's bare step of 12 ms there (session 1's 14.3 ms came from windows in which both pre-trainings were starting);
- a labelled ACDC patient gives about 20 slices (two frames), 4 batches of 5 per epoch;
- each cell's fixed costs (start, volumes, 12 validations, the test Dice): 15 s, ``jobs`` at once;
- beside the pre-trainings, the GPU is shared by more processes than it overlaps well: the pre-trainings and the
  cells that run beside them (those of the methods that need no encoder or a faster pre-training than the slowest)
  take 1.25 times the sum of their GPU times (measured: seed 1's first session, an H100, 468 s for 375 s planned;
  seed 0's first session, an H200, 411 s for about 321 s; docs/results/gpu-default-p1_acdc).

A pre-training cannot resume on another machine at the paper's width (its checkpoint and the pre-training patients
do not travel together: docs/gpu_run.md, "On a fresh machine"), so it must end within its session; fine-tuning resumes
by cell, so the pre-trained methods' cells fill as many later sessions as they need.
"""

from __future__ import annotations

from dataclasses import dataclass

from experiments.gpu_session.budget import GpuRunBudget
from experiments.gpu_session.terms import TERMS, SessionTerms

__all__ = ["Session", "format_plan", "plan_sessions"]

#: machine start, installing the wheels, unpacking the ACDC payload, the worker's start (measured, H200)
START_S = 110.0
#: the ``speed`` step by budget (measured for the default, H200), and the ``diagnose`` step (measured, H200)
SPEED_S = {"default": 67.0, "paper": 100.0}
DIAGNOSE_S = 86.0
#: packing what comes back, per call, and the calls of a session (10 minutes at most each)
PACK_S = 30.0
CALLS_PER_LEASE = 2
#: H100 seconds per pre-training iteration (batch 48, paper width) and iterations per epoch; views on the GPU: +5%
PRETRAIN_ITERATION_S = {"simclr": 0.022, "gcl": 0.112}
PRETRAIN_ITERATIONS_PER_EPOCH = 878 / 48
VIEWS_ON_DEVICE = 1.05
#: GPU seconds per fine-tuning iteration, 8 cells at once (measured, H100: 6.8 ms per iteration of all cells together)
FINETUNE_ITERATION_S = 0.0068
#: labelled slices per ACDC patient, and each fine-tuning cell's fixed seconds
SLICES_PER_PATIENT = 20
CELL_FIXED_S = 15.0
#: the GPU time of the parts that run beside the pre-trainings, over the sum of their GPU times alone (measured)
SIDE_BY_SIDE = 1.25
#: the share of a session's device time kept free for what the prediction misses
MARGIN = 0.15


@dataclass(frozen=True)
class Session:
    """One session: its parts (what, predicted seconds), in order."""

    parts: tuple[tuple[str, float], ...]

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.parts)

    def fits(self, terms: SessionTerms = TERMS, margin: float = MARGIN) -> bool:
        """Whether the session ends within the device time, ``margin`` of it kept free."""
        return self.seconds <= (1 - margin) * terms.device_seconds


def _cell_seconds(budget: GpuRunBudget) -> dict[int, float]:
    """GPU seconds of one fine-tuning cell at each L (the GPU the bottleneck: ``jobs`` cells share it)."""
    epochs, per_batch = budget.finetune["epochs"], budget.finetune["batch_size"]
    return {
        n: epochs * -(-SLICES_PER_PATIENT * n // per_batch) * FINETUNE_ITERATION_S + CELL_FIXED_S / budget.jobs
        for n in budget.num_labeled
    }


def plan_sessions(budget: GpuRunBudget, terms: SessionTerms = TERMS) -> list[Session]:
    """
    The sessions of a GPU budget. The first runs the speed benchmark, the diagnosis and both pre-trainings side by
    side; the fine-tuning cells, random-init first (they need no encoder), then the pre-trained methods' (their
    encoders reach a fresh machine with the carry), fill the GPU time left in it and as many later sessions as they
    need, in that order and by L, each session's device time kept :py:data:`MARGIN` free.
    """
    start = ("machine start, wheels, data", START_S)
    pack = ("packing", CALLS_PER_LEASE * PACK_S)
    epochs = budget.pretrain["epochs"]
    pretrain = PRETRAIN_ITERATIONS_PER_EPOCH * epochs * sum(PRETRAIN_ITERATION_S.values()) * VIEWS_ON_DEVICE
    slowest = max(PRETRAIN_ITERATION_S, key=PRETRAIN_ITERATION_S.get)
    per_cell = _cell_seconds(budget)

    def seconds(cell: tuple[str, int], beside: bool) -> float:
        """A cell's GPU seconds, shared with the pre-trainings when ``beside`` and its method does not wait for the
        slowest of them."""
        method, n = cell
        return per_cell[n] * (SIDE_BY_SIDE if beside and method != slowest else 1.0)

    pretrained = tuple(m for m in budget.methods if m != "random")
    cells = [("random", n) for n in budget.num_labeled for _ in range(budget.repeats) if "random" in budget.methods]
    cells += [(m, n) for n in budget.num_labeled for m in pretrained for _ in range(budget.repeats)]
    room = (1 - MARGIN) * terms.device_seconds - start[1] - pack[1]
    if max(per_cell.values()) > room:
        raise ValueError(f"a fine-tuning cell at L = {max(per_cell, key=per_cell.get)} fits no session.")
    fixed = [("speed", SPEED_S[budget.name])] if "speed" in budget.steps else []
    fixed += [("diagnose", DIAGNOSE_S)] if "diagnose" in budget.steps else []
    fixed.append((f"pre-training {' and '.join(PRETRAIN_ITERATION_S)}, {epochs} epochs", pretrain * SIDE_BY_SIDE))
    sessions, batch = [], []
    for cell in cells + [None]:
        # the pre-trainings run in the first session: its cells run beside them
        used = sum(part for _, part in fixed) + sum(part for _, _, part in batch)
        if cell is None or ((batch or fixed) and used + seconds(cell, not sessions) > room):
            sessions.append(Session((start, *fixed, *_cell_parts(batch), pack)))
            fixed, batch = [], []
        if cell is not None:
            batch.append((*cell, seconds(cell, not sessions)))
    return sessions


def _cell_parts(batch: list[tuple[str, int, float]]) -> list[tuple[str, float]]:
    """One part per method of ``batch``'s cells (method, L, GPU seconds): how many at each L, and their seconds."""
    parts = []
    for method in dict.fromkeys(m for m, _, _ in batch):
        ls = [n for m, n, _ in batch if m == method]
        counts = ", ".join(f"{ls.count(n)} at L = {n}" for n in dict.fromkeys(ls))
        parts.append((f"{len(ls)} {method} cells ({counts})", sum(t for m, _, t in batch if m == method)))
    return parts


def format_plan(budget: GpuRunBudget, terms: SessionTerms = TERMS) -> str:
    """The plan as a Markdown table, one row per part, and each session's total against the device time."""
    lines = [
        f"budget {budget.name}: predicted GPU seconds per session (from H200 and H100 sessions, docs/gpu_run.md)",
        "",
        "| session | part | seconds |",
        "|---|---|---|",
    ]
    for number, session in enumerate(plan_sessions(budget, terms), start=1):
        lines += [f"| {number} | {what} | {seconds:.0f} |" for what, seconds in session.parts]
        verdict = "fits" if session.fits(terms) else "DOES NOT FIT"
        lines.append(
            f"| {number} | **total** | **{session.seconds:.0f}** of {terms.device_seconds} "
            f"({session.seconds / 60:.1f} min; {verdict} with {MARGIN:.0%} kept free) |"
        )
    return "\n".join(lines)
