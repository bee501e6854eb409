"""
``python -m experiments.gpu_session``: the whole comparison on a time-limited GPU session, one command repeated.

Each call (a command of at most 10 minutes) starts the detached worker when none runs and work is left, waits up to
``--wait`` seconds for it, then packs what is done into ``--out`` (:py:mod:`~experiments.gpu_session.pack`) and
returns: 0 when the run is finished, 2 while it goes on (call again), 1 when it stopped on a diagnosis verdict or
a step failed for good. On a fresh machine, ``--resume-from`` restores the work folder from what an earlier call
brought back.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from experiments.gpu_session import steps
from experiments.gpu_session.budget import BUDGETS, get_budget
from experiments.gpu_session.kept_encoders import keep_encoders
from experiments.gpu_session.pack import ARCHIVE, REPORT, collect, pack, repack, unpack
from experiments.gpu_session.sessions import format_plan, plan_sessions
from experiments.gpu_session.state import RunState, worker_running
from experiments.gpu_session.summary import run_report
from experiments.gpu_session.terms import MIB, TERMS, SessionTerms, travel_bytes
from experiments.presets import preset_cuts

__all__ = ["main_gpu_run", "parser"]

logger = logging.getLogger("experiments")

#: seconds a call waits for the worker it started to take the work folder's lock
_START_SECONDS = 120


def parser(prog: str = "python -m experiments.gpu_session") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Speed benchmark, diagnosis of the default recipe, pre-training (GCL, SimCLR) and fine-tuning "
        "(random, SimCLR, GCL at L = 1 and 2 over paired draws) on one GPU, within the session terms: run the same "
        "command again until it returns 0 (docs/gpu_run.md).",
    )
    p.add_argument("--out", type=Path, default=None, help="where the call leaves what comes back ($OUT; required)")
    p.add_argument(
        "--work",
        type=Path,
        default=Path(os.environ.get("GCL_GPU_RUN_WORK", "/tmp/gcl-gpu-run")),
        help="the run's folder on this machine (default $GCL_GPU_RUN_WORK or /tmp/gcl-gpu-run)",
    )
    p.add_argument(
        "--resume-from",
        type=Path,
        default=None,
        help="a folder holding what an earlier call brought back (its run.tgz.* parts): on a machine whose work "
        "folder is empty the run resumes from it; ignored when the work folder already holds the run",
    )
    p.add_argument(
        "--budget",
        default="default",
        choices=[b for b in BUDGETS if b != "rehearse"] + ["rehearse"],
        help="the sizes of the steps (default: the cut that fits two 15-minute sessions of an H100; paper: the "
        "paper's 300 + 300 epochs, whose pre-training fits no session; rehearse: tiny, on a CPU)",
    )
    p.add_argument(
        "--pretrain-seed",
        type=int,
        default=0,
        metavar="N",
        help="run the comparison again from pre-training seed N >= 1 (budget <budget>-pN: SimCLR and GCL pre-trained "
        "with seed N and fine-tuned on the same draws; no speed or diagnosis step; joined to seed 0's rows by "
        "'protocol --with')",
    )
    p.add_argument(
        "--data-root",
        default=os.environ.get("GCL_DATA_ROOT"),
        help="folder holding acdc/ (default $GCL_DATA_ROOT; the rehearsal generates a phantom without it)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=None,
        help=f"seconds to wait before packing, 0 to --command-seconds less --pack-seconds (default that, "
        f"{TERMS.max_wait} with the default terms; less where less device time is left: the call returns about "
        "--pack-seconds after its wait)",
    )
    p.add_argument(
        "--collect",
        type=Path,
        default=None,
        metavar="RETURNED",
        help="do not run: copy the results of what a call brought back (RETURNED) into --out, as docs/results keeps "
        "an experiment (results.csv, table.md, report.md, the speed JSON, the diagnosis, and the pre-trained "
        "encoders as bfloat16 cards in encoders/; no other weights)",
    )
    p.add_argument(
        "--make-carry",
        type=Path,
        default=None,
        metavar="RETURNED",
        help="do not run: pack what a call brought back (RETURNED) again into --out, within the "
        "room that the checkout and .offline/ leave under --tree-bytes that travel; weights that do not fit are left "
        "behind and run again on the fresh machine",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="do not run: print the predicted H100 time of each session of --budget against the session terms",
    )
    p.add_argument(
        "--rehearse",
        action="store_true",
        help="rehearse the whole runbook on this CPU at tiny sizes: separate commands, a machine given back mid-run "
        "and a fresh one resuming from what came back, every returned folder checked against the terms",
    )
    SessionTerms.add_options(p)
    return p


#: the names of the files a call brings back (an earlier carry, replaced by ``--make-carry``)
_RETURNED_NAME = re.compile(rf"^(gpu_run\.json|{REPORT}|speed_\w+\.json|{ARCHIVE}\.\d+)$")
#: what the carry leaves free of the working tree's limit, for files that change before the call
_CARRY_MARGIN = 1 * MIB


def carry_room(terms: SessionTerms = TERMS) -> int:
    """
    Bytes left for a carried folder under the working tree's limit (``terms.tree_bytes``), beside this checkout's
    tracked and not ignored files and its ``.offline/`` payload (less a margin of :py:data:`_CARRY_MARGIN`).

    Raises:
        SystemExit: outside a git checkout, or when nothing is left.
    """
    root = steps.checkout_root()
    if root is None or not (root / ".git").exists():
        raise SystemExit("--make-carry needs the git checkout that travels (its size decides the room).")
    offline = root / ".offline"
    used = travel_bytes(root)["total"] + (travel_bytes(root, [".offline"])[".offline"] if offline.exists() else 0)
    room = terms.tree_bytes - used - _CARRY_MARGIN
    if room <= 0:
        raise SystemExit(f"the checkout and .offline/ take {used / MIB:.1f} MiB: no room to carry anything.")
    return room


def _prepare(args: argparse.Namespace, state: RunState) -> None:
    """The work folder holds the run afterwards: found there, restored from ``--resume-from``, or new."""
    if state.exists():
        if state.read()["budget"] != args.budget:
            raise SystemExit(
                f"{state.path} holds a run of budget {state.read()['budget']!r}, not {args.budget!r}: "
                "use another --work."
            )
        if args.resume_from is not None:
            logger.info("%s already holds the run: --resume-from %s is not needed.", args.work, args.resume_from)
        return
    if args.resume_from is not None and any(Path(args.resume_from).glob(f"{ARCHIVE}.*")):
        restored = unpack(args.resume_from, args.work)
        if restored["budget"] != args.budget:
            raise SystemExit(f"{args.resume_from} holds a run of budget {restored['budget']!r}, not {args.budget!r}.")
        if args.data_root is not None:  # this machine's data (the worker points the split files at it)
            state.update(data_root=args.data_root)
        logger.info("Resumed the run from %s into %s.", args.resume_from, args.work)
        return
    if args.resume_from is not None:
        logger.info("%s holds nothing of an earlier run: starting a new one.", args.resume_from)
    state.create(args.budget, args.data_root, get_budget(args.budget).steps)


def _start_worker(work: Path) -> subprocess.Popen:
    """The worker, in a new session (``setsid``): it runs on when this command returns, while the machine is held."""
    log = work / "logs" / "worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    root = steps.checkout_root()
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with open(log, "a") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "experiments.gpu_session.worker", "--work", str(work)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
            env=env,
            start_new_session=True,
        )
    deadline = time.time() + _START_SECONDS
    while not worker_running(work) and worker.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    logger.info("Started the worker (process %d); its log: %s.", worker.pid, log)
    return worker


def main_gpu_run(argv: Sequence[str]) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.pretrain_seed:
        try:
            args.budget = get_budget(args.budget).with_pretrain_seed(args.pretrain_seed).name
        except ValueError as error:
            cli.error(str(error))
    terms = SessionTerms.from_options(args)
    if args.wait is None:
        args.wait = terms.max_wait
    if not 0 <= args.wait <= terms.max_wait:  # a longer wait runs into the command limit before the call has packed
        cli.error(
            f"--wait {args.wait:g}: give 0 to {terms.max_wait} s; a call packs for about {terms.pack_seconds} s after "
            f"its wait and is stopped at {terms.command_seconds} s, and what it has not packed does not come back"
        )
    if args.plan:
        print(format_plan(get_budget(args.budget), terms))
        return 0 if all(session.fits(terms) for session in plan_sessions(get_budget(args.budget), terms)) else 1
    if args.out is None:
        cli.error("the following arguments are required: --out")
    if args.collect is not None:
        for path in collect(args.collect, args.out):
            print(path)
        return 0
    if args.make_carry is not None:
        if args.make_carry.resolve() == args.out.resolve():
            raise SystemExit("--make-carry and --out name the same folder: pack into another one.")
        if args.out.exists():  # an earlier carry in the checkout would count against its own room
            foreign = [p.name for p in args.out.iterdir() if not _RETURNED_NAME.match(p.name)]
            if foreign:
                raise SystemExit(
                    f"--out {args.out} holds other files than a carry ({', '.join(foreign)}): not replaced."
                )
            shutil.rmtree(args.out)
        room = carry_room(terms)
        manifest = repack(args.make_carry, args.out, room, terms)
        size = sum(p.stat().st_size for p in args.out.iterdir())
        left = ", ".join(manifest["left_behind"]) or "nothing"
        print(f"{args.out}: {size / MIB:.2f} MiB of {room / MIB:.2f} MiB; left behind (run again there): {left}")
        if size > room:
            print(
                "The results and logs alone are over the room: carry less of .offline/ (e.g. no wheels the "
                "machine has) or drop the carry."
            )
            return 1
        return 0
    if args.rehearse:
        from experiments.gpu_session.rehearse import rehearse

        return rehearse(args.out, data_root=args.data_root, terms=terms)
    args.work = args.work.resolve()
    budget = get_budget(args.budget)
    if not budget.phantom_patients and not args.data_root:
        raise SystemExit(f"budget {args.budget!r} runs on ACDC: give --data-root or set $GCL_DATA_ROOT.")
    state = RunState(args.work)
    _prepare(args, state)
    start = time.time()
    if not state.finished() and not worker_running(args.work):
        _start_worker(args.work)
    while worker_running(args.work) and time.time() - start < args.wait:
        time.sleep(min(2.0, max(0.0, args.wait - (time.time() - start))))
    running = worker_running(args.work)
    data = Path(args.data_root) if args.data_root else args.work / "data"
    folder = steps.experiment(args.work, budget, data).folder
    speed = steps.speed_file(args.work, budget)
    report = run_report(args.work, speed, folder, budget.pretrain.get("epochs"), preset_cuts(budget.preset()))
    keep_encoders(args.work, args.budget, steps.checkout_root())
    manifest = pack(args.work, args.out, report, [speed] if speed.exists() else [], terms=terms)
    current = state.read()
    print(f"gpu-run ({args.budget}): " + ", ".join(f"{n} {s['status']}" for n, s in current["steps"].items()))
    if current["stopped"]:
        print(f"STOPPED: {current['stopped']}")
    left = ", ".join(manifest["left_behind"]) or "nothing"
    print(f"returned to {args.out}: {len(manifest['parts'])} archive parts; left behind: {left}")
    if running:
        print("The run goes on: run the same command again to wait for it and collect.")
        return 2
    if not state.finished():
        print(
            f"Steps left to run or retry ({', '.join(state.steps_to_run())}): run the same command again "
            f"(the worker's log: {args.work / 'logs' / 'worker.log'})."
        )
        return 2
    failed = any(s["status"] == "failed" for s in current["steps"].values())
    return 1 if current["stopped"] or failed else 0
