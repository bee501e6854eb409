"""
A plan's CPU runs carried over to a new machine, and the rows of its finished runs brought back to main (issue 53's
rounds and gates).

A plan (``docs/results/<plan>``) runs from a git worktree at a fixed commit; the worktree's name is the first part of
the ``run_dir`` of the plan's CPU models in ``models.csv`` (``<worktree>/docs/results/<plan>/runs/<run>``, relative
to the runs root, the worktree's parent folder); a GPU set's ``run_dir`` lies elsewhere and is not a CPU job. The
plan's queue (``benchmarks/queue.sh``) runs jobs ``0 .. N-1``, which are those CPU models in ``models.csv``'s order
(each plan's tests check it: ``tests/experiments/test_gate_random.py``, ``tests/experiments/test_cpu_round_jobs.py``),
and marks a job finished with ``runs/claims/<index>/done`` once it has trained and been scored.

The models and logs of a run live only on the machine that ran it; what outlives the machine is what main holds, the
rows. A job is finished in main when its model has rows in every ``dice_*.csv`` of main's plan folder (``collect``
brings a job's rows to main only once its claim is ``done``, so a job is never half there).

``prepare`` readies the worktree on this machine. A new one is added at the plan's commit, main's rows of the
finished jobs are copied into it (``curves.csv``, ``times.csv``, ``dice_*.csv``, with any row of an unfinished job
left out, so that job starts over and its rows are not mixed with the lost ones) and those jobs are marked ``done``,
so that the queue skips them. A worktree that is already here (the machine outlived the session) is checked to stand
at the commit and otherwise left as it is. ``collect`` gathers the worktree's ``times.csv`` from its runs' logs and
writes the worktree's rows of every job now ``done`` into main's row files, in place of any rows main held of that
run (a lost machine's unfinished try). It prints file names and row counts only, never a Dice: a plan's rows are read
once, by its reading.

Usage (from main's checkout)::

    python -m benchmarks.resume_plan prepare docs/results/gate-random_acdc --commit f606f15 --runs-root /work
    python -m benchmarks.resume_plan collect docs/results/gate-random_acdc --runs-root /work
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.finetune_curves import run_name, times

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Job:
    """A CPU job of a plan's queue: its index, its model in ``models.csv`` and its run folder's name."""

    index: int
    model: str
    run: str


def cpu_jobs(plan: Path) -> tuple[str, list[Job]]:
    """The worktree's name and the CPU jobs of ``plan``, in ``models.csv``'s order.

    Raises:
        SystemExit: no CPU model in ``plan/models.csv``, CPU models in more than one worktree, or runs that another
            plan lists as its models (``listed_elsewhere``).
    """
    with (plan / "models.csv").open() as f:
        rows = list(csv.DictReader(f))
    jobs, worktrees = [], set()
    for row in rows:
        parts = Path(row.get("run_dir") or "").parts
        if len(parts) == 6 and parts[1:5] == ("docs", "results", plan.name, "runs"):
            worktrees.add(parts[0])
            jobs.append(Job(len(jobs), row["model"], parts[5]))
    if len(worktrees) != 1:
        raise SystemExit(
            f"{plan / 'models.csv'}: its CPU models must run in one worktree (<worktree>/docs/results/{plan.name}"
            f"/runs/<run>); found {sorted(worktrees) or 'none'}"
        )
    elsewhere = listed_elsewhere(plan)
    if elsewhere:
        raise SystemExit(
            f"{plan.name}'s runs are also models of {[p.name for p in elsewhere]}: the rows its jobs score there are"
            " not carried by this tool (carry that plan by hand)"
        )
    return worktrees.pop(), jobs


def listed_elsewhere(plan: Path) -> list[Path]:
    """The other plan folders beside ``plan`` whose ``models.csv`` lists one of ``plan``'s runs (as the
    full-supervision gate lists round 11's, which score their test rows there)."""
    inside = ("docs", "results", plan.name, "runs")
    found = []
    for other in sorted(plan.parent.glob("*/models.csv")):
        if other.parent == plan:
            continue
        with other.open() as f:
            if any(Path(row.get("run_dir") or "").parts[1:5] == inside for row in csv.DictReader(f)):
                found.append(other.parent)
    return found


def row_files(folder: Path) -> list[Path]:
    """The row files of a plan's folder that hold rows of its jobs."""
    return [p for p in [folder / "curves.csv", folder / "times.csv", *sorted(folder.glob("dice_*.csv"))] if p.is_file()]


def _read(path: Path) -> tuple[list[str], list[dict[str, str]], str]:
    """A row file's columns, rows and line ending (``curves.csv`` is written with the csv module's ``\\r\\n``, the
    other row files with ``\\n``: each is written back with its own)."""
    with path.open(newline="") as f:
        ending = "\r\n" if f.readline().endswith("\r\n") else "\n"
        f.seek(0)
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader), ending


def _write(path: Path, fields: list[str], rows: list[dict[str, str]], ending: str) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields, lineterminator=ending)
        writer.writeheader()
        writer.writerows(rows)


def row_run(row: dict[str, str], runs: dict[str, str]) -> str | None:
    """The run folder a row belongs to: by ``model`` (``dice_*.csv``; ``runs`` maps each CPU job's model to its run
    folder), ``run`` (``times.csv``) or the run's key (``curves.csv``); ``None`` for a row of no CPU job (a GPU
    set's, a model scored under another plan)."""
    if "model" in row:
        return runs.get(row["model"])
    if "run" in row:
        return row["run"]
    return run_name(row["fold"], row["recipe"], row["labeled"], row["draw"], row["seed"])


def finished_in_main(plan: Path, jobs: list[Job]) -> list[Job]:
    """The jobs whose model has rows in every ``dice_*.csv`` of ``plan`` (none where there is no such file)."""
    scored = [{row["model"] for row in _read(path)[1]} for path in sorted(plan.glob("dice_*.csv"))]
    return [job for job in jobs if scored and all(job.model in models for models in scored)]


def _git(where: Path, *args: str) -> str:
    """``git -C where args``'s output; its message, with the command, when it fails."""
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"git -C {where} {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _done(worktree_plan: Path, job: Job) -> bool:
    return (worktree_plan / "runs" / "claims" / str(job.index) / "done").is_file()


def prepare(plan: Path, commit: str, runs_root: Path, repo: Path = REPO) -> tuple[Path, list[Job]]:
    """Readies ``runs_root/<worktree>`` for the plan's queue (the module's docstring); returns the worktree's plan
    folder and the jobs marked finished.

    Raises:
        SystemExit: the worktree is here at another commit, or git fails (an unknown commit: its message).
    """
    plan = plan.resolve()
    name, jobs = cpu_jobs(plan)
    worktree = runs_root / name
    target = _git(repo, "rev-parse", "--verify", f"{commit}^{{commit}}")
    worktree_plan = worktree / plan.relative_to(repo)
    if worktree.exists():
        head = _git(worktree, "rev-parse", "HEAD")
        if head != target:
            raise SystemExit(f"{worktree} stands at {head}, not at the plan's commit {target}: move it aside first")
        return worktree_plan, [job for job in jobs if _done(worktree_plan, job)]
    _git(repo, "worktree", "add", "--detach", str(worktree), target)
    worktree_plan.mkdir(parents=True, exist_ok=True)
    finished = finished_in_main(plan, jobs)
    by_model = model_runs(jobs)
    unfinished = set(by_model.values()) - {job.run for job in finished}
    for path in row_files(plan):
        fields, rows, ending = _read(path)
        _write(worktree_plan / path.name, fields, [r for r in rows if row_run(r, by_model) not in unfinished], ending)
    for job in finished:
        claim = worktree_plan / "runs" / "claims" / str(job.index)
        claim.mkdir(parents=True, exist_ok=True)
        (claim / "done").touch()
    return worktree_plan, finished


def model_runs(jobs: list[Job]) -> dict[str, str]:
    """Each job's model mapped to its run folder (``row_run``'s ``runs``)."""
    return {job.model: job.run for job in jobs}


def merged(main_rows: list[dict], rows: list[dict], runs: set[str], by_model: dict[str, str]) -> list[dict]:
    """Main's rows with those of each run in ``runs`` replaced by ``rows``' rows of that run (where ``rows`` has
    any; in main's place, or appended for a run main lacks): a finished run's rows are the worktree's, and a row
    that main holds of a lost, unfinished try of the same run goes. ``by_model``: ``model_runs`` of the plan's
    jobs."""
    fresh: dict[str, list[dict]] = {}
    for row in rows:
        run = row_run(row, by_model)
        if run in runs:
            fresh.setdefault(run, []).append(row)
    out, placed = [], set()
    for row in main_rows:
        run = row_run(row, by_model)
        if run not in fresh:
            out.append(row)
        elif run not in placed:
            out.extend(fresh[run])
            placed.add(run)
    return out + [row for run, group in fresh.items() if run not in placed for row in group]


def collect(plan: Path, runs_root: Path, repo: Path = REPO) -> dict[str, int]:
    """Main's row files of ``plan`` with the worktree's rows of every job whose claim is ``done`` (``merged``;
    ``times.csv`` gathered first from the runs' logs). Returns, for each file, the rows main did not hold.

    Raises:
        SystemExit: a file whose columns differ between the worktree and main.
    """
    plan = plan.resolve()
    name, jobs = cpu_jobs(plan)
    worktree_plan = runs_root / name / plan.relative_to(repo)
    if list(worktree_plan.glob("runs/*/log.txt")):
        times(worktree_plan)
    finished = {job.run for job in jobs if _done(worktree_plan, job)}
    by_model = model_runs(jobs)
    added = {}
    for path in row_files(worktree_plan):
        fields, rows, ending = _read(path)
        mine = plan / path.name
        main_fields, main_rows, ending = _read(mine) if mine.is_file() else (fields, [], ending)
        if main_fields != fields:
            raise SystemExit(f"{path} has the columns {fields}, {mine} has {main_fields}: not merged")
        result = merged(main_rows, rows, finished, by_model)
        if result != main_rows:
            _write(mine, fields, result, ending)
        added[path.name] = len({tuple(r.values()) for r in result} - {tuple(r.values()) for r in main_rows})
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("prepare", "collect"):
        p = sub.add_parser(command)
        p.add_argument("plan", type=Path, help="main's plan folder, docs/results/<plan>")
        p.add_argument("--runs-root", type=Path, default=REPO.parent, help="the worktree's parent folder")
        if command == "prepare":
            p.add_argument("--commit", required=True, help="the commit the plan's runs use (its README says it)")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        worktree_plan, finished = prepare(args.plan, args.commit, args.runs_root.resolve())
        print(f"{worktree_plan}: jobs {[job.index for job in finished]} finished; the queue runs the others")
    else:
        for name, count in collect(args.plan, args.runs_root.resolve()).items():
            print(f"{args.plan / name}: {count} rows added")
    return 0


if __name__ == "__main__":
    sys.exit(main())
