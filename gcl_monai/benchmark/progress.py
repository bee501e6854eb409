"""Progress of an experiment: ``cell i of n``, the elapsed time and an ETA."""

from __future__ import annotations

import logging
import time

from gcl_monai.benchmark.cells import read_status
from gcl_monai.benchmark.experiment import FinetuneCell, PretrainCell

__all__ = ["Progress", "hms", "past_durations", "recorded_seconds"]

logger = logging.getLogger("gcl_monai.benchmark")


class Progress:
    """Logs ``cell i of n``, the elapsed time and an ETA from the mean duration of each kind of cell."""

    def __init__(self, cells: list[PretrainCell | FinetuneCell], durations: dict[str, list[float]], jobs: int = 1):
        self.cells = cells
        self.durations = durations
        self.jobs = jobs
        self.remaining = set(range(len(cells)))
        self.start = time.time()

    @staticmethod
    def kind(cell: PretrainCell | FinetuneCell) -> str:
        return "pretrain" if isinstance(cell, PretrainCell) else "finetune"

    def eta(self) -> str:
        """The mean duration of each kind of cell times the cells not done yet, shared by the jobs."""
        remaining: dict[str, int] = {}
        for index in self.remaining:
            kind = self.kind(self.cells[index])
            remaining[kind] = remaining.get(kind, 0) + 1
        seconds, unknown = 0.0, []
        for kind, count in remaining.items():
            if self.durations.get(kind):
                seconds += count * sum(self.durations[kind]) / len(self.durations[kind])
            else:
                unknown.append(f"{count} {kind}")
        text = hms(seconds / self.jobs)
        return text + (f" + {', '.join(unknown)} cell(s) not yet timed" if unknown else "")

    def log(self, index: int, cell: PretrainCell | FinetuneCell, what: str, started: bool = False) -> None:
        """Logs cell ``index``; ``started``: the cell is about to run (the ETA includes it), else it is done."""
        if not started:
            self.remaining.discard(index)
        logger.info(
            "[cell %d of %d] %s: %s (elapsed %s, ETA %s)",
            index + 1,
            len(self.cells),
            cell.label,
            what,
            hms(time.time() - self.start),
            self.eta(),
        )

    def add(self, cell: PretrainCell | FinetuneCell, seconds: float) -> None:
        self.durations.setdefault(self.kind(cell), []).append(seconds)

    def add_recorded(self, cell: PretrainCell | FinetuneCell) -> None:
        """Counts the recorded duration of a cell taken from another experiment (when it finished there)."""
        if (seconds := recorded_seconds(cell)) is not None:
            self.add(cell, seconds)


def hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def recorded_seconds(cell: PretrainCell | FinetuneCell) -> float | None:
    """How long a finished cell took when it ran (its status file), None when it has not finished."""
    status = read_status(cell.folder)
    if status.get("status") != "finished":
        return None
    if isinstance(cell, PretrainCell):
        return status.get("seconds")
    if "finetune_seconds" not in status:
        return None
    return status["finetune_seconds"] + sum(status.get("eval_seconds", {}).values())


def past_durations(pretrain: list[PretrainCell], finetune: list[FinetuneCell]) -> dict[str, list[float]]:
    """Durations of the cells finished by earlier invocations, to seed the ETA."""
    durations: dict[str, list[float]] = {"pretrain": [], "finetune": []}
    for cells, kind in ((pretrain, "pretrain"), (finetune, "finetune")):
        durations[kind] += [s for s in map(recorded_seconds, cells) if s is not None]
    return durations
