"""Progress of an experiment in its ``progress.log``: ``cell i of n``, the elapsed time and an ETA."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType

from experiments.experiment import FinetuneCell, PretrainCell
from experiments.status import read_status

__all__ = ["Progress", "hms", "logged_to", "recorded_seconds"]

logger = logging.getLogger("experiments")


@contextmanager
def logged_to(log_file: Path) -> Iterator[None]:
    """Within it, the experiments' log (at INFO and above) also goes to ``log_file``, one line each: the time, the
    level, the message (an experiment's ``progress.log``)."""
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


class Progress:
    """
    Logs ``cell i of n``, the elapsed time and an ETA from the mean duration of each kind of cell (seeded with the
    recorded durations of the cells finished by earlier runs). Used as a context manager, it also writes the
    benchmark's log to ``log_file``.
    """

    def __init__(self, cells: list[PretrainCell | FinetuneCell], log_file: Path, jobs: int = 1):
        self.cells = cells
        self.durations: dict[str, list[float]] = {"pretrain": [], "finetune": []}
        for cell in cells:
            self.add_recorded(cell)
        self.jobs = jobs
        self.remaining = set(range(len(cells)))
        self.start = time.time()
        self.log_file = log_file
        self.logging = ExitStack()

    def __enter__(self) -> Progress:
        self.logging.enter_context(logged_to(self.log_file))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.logging.close()

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
        """Counts the recorded duration of a finished cell (run earlier, or taken from another experiment)."""
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
