"""
The state of a ``gpu-run`` in its work folder: ``gpu_run.json`` (the budget, the data, each step's status) and the
lock that the detached worker holds while it runs, so that a later command on the same machine only waits.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gcl_monai.utils import atomic_write

__all__ = ["STATE_FILE", "STEPS", "RunState", "worker_lock", "worker_running"]

STATE_FILE = "gpu_run.json"
LOCK_FILE = "worker.lock"
#: the steps, in the order the worker runs them
STEPS = ("speed", "diagnose", "compare")
#: a step that failed is tried again by a later command, at most this many times in all
MAX_ATTEMPTS = 2


class RunState:
    """
    ``gpu_run.json`` of a work folder, re-read on every access so that the command and the worker see each other's
    writes (each write replaces the file atomically).

    Args:
        work: the work folder.
    """

    def __init__(self, work: Path):
        self.work = Path(work)
        self.path = self.work / STATE_FILE

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())

    def write(self, state: dict[str, Any]) -> None:
        with atomic_write(self.path) as partial:
            partial.write_text(json.dumps(state, indent=1))

    def create(self, budget: str, data_root: str | None, steps: tuple[str, ...] = STEPS) -> dict[str, Any]:
        """A new run of ``budget`` whose ``steps`` are pending; the other steps are recorded as skipped."""
        state = {
            "budget": budget,
            "data_root": data_root,
            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
            "machines": 0,
            "stopped": "",
            "steps": {
                name: {
                    "status": "pending" if name in steps else "skipped",
                    "seconds": 0.0,
                    "attempts": 0,
                    "message": "" if name in steps else "not a step of this budget",
                }
                for name in STEPS
            },
        }
        self.write(state)
        return state

    def update_step(self, name: str, **values: Any) -> None:
        state = self.read()
        state["steps"][name].update(values)
        self.write(state)

    def update(self, **values: Any) -> None:
        state = self.read()
        state.update(values)
        self.write(state)

    def steps_to_run(self) -> list[str]:
        """The steps the worker still has to run (none once a verdict stopped the run)."""
        state = self.read()
        if state["stopped"]:
            return []
        return [
            name
            for name, step in state["steps"].items()
            if step["status"] in ("pending", "running")
            or (step["status"] == "failed" and step["attempts"] < MAX_ATTEMPTS)
        ]

    def finished(self) -> bool:
        """Nothing left for a worker to do: every step done, skipped or failed for good, or the run stopped."""
        return not self.steps_to_run()


@contextmanager
def worker_lock(work: Path, blocking: bool = False) -> Iterator[bool]:
    """
    Holds the work folder's lock (an ``flock``, released by the kernel when the holder dies) for the ``with`` block.

    Args:
        work: the work folder.
        blocking: wait for the lock (the worker, which may meet a command's brief check) instead of giving up.

    Yields:
        whether the lock was taken (False: another process holds it).
    """
    Path(work).mkdir(parents=True, exist_ok=True)
    with open(Path(work) / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def worker_running(work: Path) -> bool:
    """Whether a worker holds the lock of ``work``."""
    with worker_lock(work) as taken:
        return not taken
