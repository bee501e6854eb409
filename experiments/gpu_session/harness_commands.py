"""
What runs that move between machines add to ``python -m experiments`` (:py:data:`experiments.__main__.EXTENSIONS`):
the ``keep`` and ``restore`` commands (:py:mod:`~experiments.gpu_session.records`; ``keep --encoders`` also keeps
the finished pre-trainings' encoders as cards and ``restore --encoders`` puts them back,
:py:mod:`~experiments.gpu_session.kept_encoders`), and the run's
``--remake-encoders`` and ``--set-aside-stale-cells``, which choose its cell checks
(:py:func:`~experiments.gpu_session.elsewhere.cell_checks`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from experiments.gpu_session import records
from experiments.gpu_session.elsewhere import cell_checks
from experiments.gpu_session.kept_encoders import keep_experiment_encoders, restore_experiment_encoders
from experiments.plan import read_plan
from experiments.runner import CellCheck

__all__ = ["COMMANDS", "add_run_options", "run_checks"]

PROG = "python -m experiments"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a run that goes on from records kept on another machine."""
    parser.add_argument(
        "--remake-encoders",
        action="store_true",
        help="pre-train again a finished pre-training whose encoder is not on this machine (records restored with "
        f"'{PROG} restore') also when no fine-tuning cell left loads it (to probe it); its new encoder must have "
        "the bytes of the first one (the fingerprint its status kept), else the pre-training fails",
    )
    parser.add_argument(
        "--set-aside-stale-cells",
        action="store_true",
        help="when a pre-training made again has other bytes than its first encoder, take the new encoder and move "
        "the fine-tuning cells that loaded the first to the experiment's discarded/ (they run again) instead of "
        "failing",
    )


def run_checks(args: argparse.Namespace) -> list[CellCheck]:
    """The cell checks that :py:func:`add_run_options`' options parsed into ``args`` choose."""
    return cell_checks(args.remake_encoders, args.set_aside_stale_cells)


_WHAT = {
    "keep": "Copy an experiment folder's records (statuses, Dice, plan, split, logs, results; no weights) to a "
    "folder that outlives the machine (a committed one), or into one archive where the target ends in .tar.xz.",
    "restore": "Copy kept records (a folder or a .tar.xz archive) into an experiment folder of a new machine "
    "(which must not exist or be empty); the same benchmark command then goes on with the cells left.",
}


def _main_records(argv: Sequence[str], command: str) -> int:
    parser = argparse.ArgumentParser(prog=f"{PROG} {command}", description=_WHAT[command])
    parser.add_argument("source", type=Path, help="the experiment folder" if command == "keep" else "the kept records")
    parser.add_argument("target", type=Path)
    if command == "keep":
        parser.add_argument(
            "--encoders",
            type=Path,
            help="also keep each finished pre-training's encoder in this folder: bfloat16 with its card (recipe, "
            "seed, the plan's preset, the commit of the checkout that ran it, SHA-256), written again only when "
            "its encoder.pt changed",
        )
    else:
        parser.add_argument(
            "--encoders",
            type=Path,
            help="also put back each finished pre-training's encoder.pt from its card in this folder (kept with "
            "'keep --encoders'): float32 from bfloat16, recorded in its status and progress.log, so that the run "
            "goes on without pre-training again",
        )
    args = parser.parse_args(argv)
    copy = records.keep if command == "keep" else records.restore
    try:
        count = copy(args.source, args.target)
    except (FileNotFoundError, FileExistsError) as error:
        parser.error(str(error))
    print(f"{command}: {count} records from {args.source} to {args.target}")
    if args.encoders and command == "keep":
        plan = read_plan(args.source)
        kept = keep_experiment_encoders(args.source, args.encoders, plan["preset"]["name"], records.plan_checkout(plan))
        print(f"keep: {len(kept)} encoders of {args.source} in {args.encoders}")
    elif args.encoders:
        try:
            restored = restore_experiment_encoders(args.target, args.encoders)
        except ValueError as error:
            parser.error(f"{error} The records are restored in {args.target}: remove it to restore again.")
        print(f"restore: {len(restored)} encoders from {args.encoders} to {args.target}")
    return 0


#: the sub-commands: name -> main(argv)
COMMANDS = {command: (lambda argv, command=command: _main_records(argv, command)) for command in _WHAT}
