"""
The rehearsal of ``gpu-run`` on a CPU (``gpu-run --rehearse --out DIR``): the runbook of a lent GPU played with
tiny sizes (budget ``rehearse``), every command a separate process whose only state is its work folder (the
machine's disk) and what came back:

1. on machine A, a first command starts the run and returns at once;
2. once a fine-tuning cell is finished, a second command on A collects what is done;
3. machine A is given back: its worker is killed in the middle of the run and its work folder deleted;
4. what the second command brought back is packed again to be carried (``--make-carry``, within the room the
   checkout and ``.offline/`` leave) to machine B (a new, empty work folder), where a third command resumes from it
   and waits for the end.

Every output folder is checked against the lending terms, and the carry against the working tree's limit; the end
checks that the run finished on two machines, every cell has its result, and no fine-tuning cell finished on A was
trained again on B. ``DIR/rehearsal.md`` lists the commands and the checks.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from gcl_monai.benchmark.cells import read_status
from gcl_monai.benchmark.gpu_run import steps
from gcl_monai.benchmark.gpu_run.budget import get_budget
from gcl_monai.benchmark.gpu_run.pack import BF16_SUFFIX
from gcl_monai.benchmark.gpu_run.state import LOCK_FILE, STATE_FILE, RunState, worker_running
from gcl_monai.benchmark.gpu_run.terms import MIB, TERMS, returned_violations, travel_bytes
from gcl_monai.benchmark.report import read_results

__all__ = ["rehearse"]

#: the most a rehearsal waits for one stage (tiny sizes take a few minutes on two busy CPU cores)
_STAGE_SECONDS = 900


class _Rehearsal:
    def __init__(self, out: Path, data_root: str | None):
        self.out = Path(out).resolve()
        self.data_root = data_root
        self.lines = ["# gpu-run rehearsal", "", "| command | machine | exit code | seconds |", "|---|---|---|---|"]
        self.checks: list[tuple[str, bool, str]] = []

    def command(self, name: str, machine: str, wait: float, resume: Path | None = None) -> tuple[int, Path]:
        out = self.out / name
        argv = [
            sys.executable,
            "-m",
            "gcl_monai.benchmark",
            "gpu-run",
            "--budget",
            "rehearse",
            "--out",
            str(out),
            "--work",
            str(self.out / machine),
            "--wait",
            str(wait),
        ]
        argv += ["--resume-from", str(resume)] if resume is not None else []
        argv += ["--data-root", self.data_root] if self.data_root else []
        start = time.time()
        with open(self.out / f"{name}.log", "w") as log:
            code = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=steps.checkout_root(), check=False
            ).returncode
        self.lines.append(f"| `{' '.join(argv[1:])}` | {machine} | {code} | {time.time() - start:.0f} |")
        problems = returned_violations(out)
        self.check(f"{name}: the returned files keep the terms", not problems, "; ".join(problems))
        return code, out

    def check(self, what: str, ok: bool, detail: str = "") -> None:
        self.checks.append((what, ok, detail))

    def write(self) -> bool:
        ok = all(passed for _, passed, _ in self.checks)
        lines = self.lines + ["", "| check | result | detail |", "|---|---|---|"]
        lines += [f"| {what} | {'pass' if passed else 'FAIL'} | {detail} |" for what, passed, detail in self.checks]
        lines += ["", f"**Rehearsal {'passed' if ok else 'FAILED'}.**", ""]
        (self.out / "rehearsal.md").write_text("\n".join(lines))
        print("\n".join(lines))
        return ok


def _finished_cells(work: Path) -> set[str]:
    return {p.parent.parent.name for p in work.glob("results/*/finetune/*/eval/dice.json")}


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(1.0)
    return condition()


def _give_back(work: Path) -> None:
    """Ends the worker of ``work`` and every process of its session, as giving the machine back does."""
    pid = int((work / LOCK_FILE).read_text())
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    _wait_for(lambda: not worker_running(work), 60)


def rehearse(out: Path, data_root: str | None = None) -> int:
    """
    Runs the rehearsal into ``out`` (an empty or new folder); returns 0 when every check passes, else 1.

    Args:
        out: the rehearsal's folder (machines' work folders, each command's output folder, ``rehearsal.md``).
        data_root: a folder holding ``acdc/`` (e.g. a few real patients); None: a synthetic dataset.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty: the rehearsal needs a new folder.")
    out.mkdir(parents=True, exist_ok=True)
    run = _Rehearsal(out, data_root)
    machine_a, machine_b = run.out / "machine-a", run.out / "machine-b"

    code, _ = run.command("command-1", "machine-a", wait=0)
    run.check("command-1 starts the run and returns while it goes on", code == 2, f"exit code {code}")
    started = _wait_for(lambda: bool(_finished_cells(machine_a)), _STAGE_SECONDS)
    run.check("a fine-tuning cell finishes on machine A", started)
    code, returned = run.command("command-2", "machine-a", wait=0)
    run.check("command-2 only collects (exit code 2 while running, 0 when done)", code in (0, 2), f"exit code {code}")
    if worker_running(machine_a):
        _give_back(machine_a)

    carry = run.out / "carry"
    argv = [sys.executable, "-m", "gcl_monai.benchmark", "gpu-run", "--make-carry", str(returned), "--out", str(carry)]
    with open(run.out / "make-carry.log", "w") as log:
        code = subprocess.run(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=steps.checkout_root(), check=False
        ).returncode
    run.lines.append(f"| `{' '.join(argv[1:])}` | here | {code} | |")
    run.check("what came back is packed again to be carried", code == 0, f"exit code {code}")
    packed = json.loads((carry / STATE_FILE).read_text())["returned"]["packed"]
    # the cells whose results came back (a cell finished on A after command-2 packed is lost with the machine)
    done_on_a = {Path(p).parent.parent.name for p in packed if p.endswith("/eval/dice.json")}
    root = steps.checkout_root()
    payload = root / ".offline" if root is not None else None
    sizes = travel_bytes(root) if root is not None and (root / ".git").exists() else {"total": 0}
    carried = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file())
    offline = sum(p.stat().st_size for p in payload.rglob("*") if p.is_file()) if payload and payload.is_dir() else 0
    total = sizes["total"] + carried + offline
    run.check(
        "what travels to machine B (checkout, .offline payload, carried files) is within the working tree's limit",
        total <= TERMS.tree_bytes,
        f"checkout {sizes['total'] / MIB:.1f} MiB + .offline {offline / MIB:.1f} MiB + carried {carried / MIB:.2f} "
        f"MiB = {total / MIB:.1f} MiB (limit {TERMS.tree_bytes / MIB:.0f} MiB)",
    )
    shutil.rmtree(machine_a)  # the machine went back with its disk: nothing of it but the carry reaches B
    code, _ = run.command("command-3", "machine-b", wait=_STAGE_SECONDS, resume=carry)
    run.check("command-3 resumes on machine B and finishes the run", code == 0, f"exit code {code}")
    state = RunState(machine_b).read()
    run.check("the run took two machines", state["machines"] == 2, f"machines {state['machines']}")
    budget = get_budget("rehearse")
    folder = steps.experiment(machine_b, budget, machine_b / "data").folder
    rows = read_results(folder / "results.csv") if (folder / "results.csv").exists() else []
    expected = len(budget.methods) * len(budget.num_labeled) * budget.repeats * 2  # test and validation rows
    run.check(
        "every cell has its results, all ok",
        len(rows) == expected and all(r["status"] == "ok" for r in rows),
        f"{len(rows)} rows of {expected}, statuses {sorted({r['status'] for r in rows})}",
    )
    log = (folder / "progress.log").read_text() if (folder / "progress.log").exists() else ""
    log = log.split(f"cells in {folder}")[-1]  # machine B's runs: the log came from A with the archive
    retrained = sorted(c for c in done_on_a if f"finetune {c}: starting" in log)
    run.check(
        "no fine-tuning cell finished on machine A was trained again on machine B",
        not retrained,
        f"finished on A: {len(done_on_a)}; trained again: {', '.join(retrained) or 'none'}",
    )
    travelled = [p for p in packed if p.endswith(BF16_SUFFIX)]
    pretrain_b = {p.parent.name: read_status(p.parent).get("status") for p in folder.glob("pretrain/*/benchmark.json")}
    run.check(
        "every pre-training finished on machine B",
        set(pretrain_b.values()) == {"finished"},
        f"{pretrain_b}; checkpoints carried as bfloat16: {', '.join(travelled) or 'none'}",
    )
    return 0 if run.write() else 1
