"""
The detached worker of ``gpu-run``: ``python -m experiments.gpu_session.worker --work DIR``, started by the
command in a new session (``setsid``) so that it outlives the command while the machine is held. It takes the work
folder's lock, then runs the steps not done yet, in order (:py:data:`~experiments.gpu_session.state.STEPS`),
recording each one's status in ``gpu_run.json``; a diagnosis verdict of collapse or stall stops the run.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.experiment import DATASETS
from experiments.gpu_session import steps
from experiments.gpu_session.budget import get_budget
from experiments.gpu_session.state import RunState, worker_lock

__all__ = ["run_worker"]

logger = logging.getLogger("experiments")


def run_worker(work: Path) -> int:
    """
    Runs the steps left in ``work`` (see the module's description), once it holds the work folder's lock; returns
    0, or 1 when a step failed.
    """
    work = Path(work).resolve()
    state = RunState(work)
    with worker_lock(work, blocking=True):
        budget = get_budget(state.read()["budget"])
        state.update(machines=state.read()["machines"] + 1)
        try:
            data = steps.data_root(work, budget, state.read()["data_root"])
        except FileNotFoundError as error:  # no later call can do better: stop with the reason
            logger.error("STOPPED: %s", error)
            state.update(stopped=str(error))
            return 1
        dataset_dir = str((data / DATASETS[steps.DATASET][1]).resolve())
        previous = state.read().get("dataset_dir")
        if previous and previous != dataset_dir:  # resumed on another machine, whose data is elsewhere
            moved = steps.relocate_splits(work, previous, dataset_dir)
            logger.info("Split files pointed from %s to %s: %s.", previous, dataset_dir, ", ".join(map(str, moved)))
        state.update(dataset_dir=dataset_dir)
        failed = False
        for name in state.steps_to_run():
            step = state.read()["steps"][name]
            state.update_step(name, status="running", attempts=step["attempts"] + 1)
            start = time.time()
            stop = ""
            try:
                if name == "speed":
                    status, message = steps.run_speed(work, budget)
                elif name == "diagnose":
                    status, message, stop = steps.run_diagnose(work, budget, data)
                else:
                    status, message = steps.run_compare(work, budget, data)
            except Exception as error:  # recorded in the state; a later command tries the step again
                logger.exception("Step %s failed.", name)
                status, message = "failed", repr(error)
            seconds = step["seconds"] + time.time() - start
            state.update_step(name, status=status, seconds=seconds, message=message)
            failed |= status == "failed"
            if stop:
                logger.error("STOPPED after %s: %s", name, stop)
                state.update(stopped=stop)
                break
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.gpu_session.worker", description=__doc__)
    parser.add_argument("--work", type=Path, required=True, help="the run's work folder (holds gpu_run.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s - %(name)s - %(levelname)s - %(message)s", stream=sys.stdout
    )
    return run_worker(args.work)


if __name__ == "__main__":
    sys.exit(main())
