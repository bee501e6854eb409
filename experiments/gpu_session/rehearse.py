"""
The rehearsal of ``gpu-run`` on a CPU (``gpu-run --rehearse --out DIR``): the runbook of a GPU session played
with tiny sizes (budget ``rehearse``), every command a separate process whose only state is its work folder (the
machine's disk) and what came back:

1. on machine A (the first session), a first command starts the run and returns at once;
2. once both pre-trainings and a fine-tuning cell are finished, the run is frozen mid-way (its worker's session
   stopped) and a second command on A collects what is done;
3. machine A is given back: its worker is killed in the middle of the run and its work folder deleted;
4. what the second command brought back is packed again to be carried (``--make-carry``: the finished encoders as
   bfloat16, within the room the checkout and ``.offline/`` leave), and the dataset is packed again with only the
   patients the fine-tuning reads (``experiments.gpu_session.offline_payload pack --patients-of``), for machine B
   (the second session: a new, empty work folder and that cut dataset), where a third command resumes from the carry;
   it is run again, as the runbook says, while it answers that the run goes on (each call waits at most
   ``SessionTerms.max_wait``).

Every output folder is checked against the session terms, what travels to B (checkout, wheels, cut dataset, carry)
against the working tree's limit, here and at the paper's width, and each call of a first session (the checkout and
the whole ACDC payload, in as many parts as the limit needs, then the wheels and the results) against it too; the
end checks that the run finished on two machines, every cell has its result, no pre-training and no fine-tuning
cell finished on A ran again on B, and the encoders reached B as bfloat16. ``DIR/rehearsal.md`` lists the commands
and the checks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from monai.networks.nets import BasicUNet

from experiments.gpu_session import steps
from experiments.gpu_session.budget import get_budget
from experiments.gpu_session.kept_encoders import ENCODERS
from experiments.gpu_session.pack import BF16_SUFFIX
from experiments.gpu_session.state import LOCK_FILE, STATE_FILE, RunState, worker_running
from experiments.gpu_session.terms import (
    MIB,
    TERMS,
    SessionTerms,
    returned_violations,
    session_calls,
    travel_bytes,
)
from experiments.presets import PAPER
from experiments.report import read_results
from experiments.status import STATUS_FILE, read_status
from gcl_monai.networks import ENCODER_PREFIXES

__all__ = ["rehearse"]

#: the wheels of ``.offline/wheels`` (``offline_payload wheels``, without nibabel: 2,172,898 bytes on 2026-11-28), the
#: whole ACDC payload (``experiments.gpu_session.offline_payload pack``: every patient, what a first session's
#: pre-trainings read) and the payload cut to the fine-tuning's patients of the default budget (``pack
#: --patients-of``), as measured (docs/gpu_run.md, "On a fresh machine" and "Travel budget")
WHEELS_BYTES = 2_200_000
FULL_PAYLOAD_BYTES = 44_500_000
CUT_PAYLOAD_BYTES = 21_500_000
#: the most a rehearsal waits for one stage (tiny sizes take a few minutes on two busy CPU cores)
_STAGE_SECONDS = 900


class _Rehearsal:
    def __init__(self, out: Path, data_root: str | None, terms: SessionTerms):
        self.out = Path(out).resolve()
        self.data_root = data_root
        self.terms = terms
        self.lines = ["# gpu-run rehearsal", "", "| command | machine | exit code | seconds |", "|---|---|---|---|"]
        self.checks: list[tuple[str, bool, str]] = []

    def command(
        self, name: str, machine: str, wait: float, resume: Path | None = None, data_root: str | None = None
    ) -> tuple[int, Path]:
        out = self.out / name
        argv = [
            sys.executable,
            "-m",
            "experiments.gpu_session",
            "--budget",
            "rehearse",
            "--out",
            str(out),
            "--work",
            str(self.out / machine),
            "--wait",
            str(wait),
            *self.terms.as_options(),
        ]
        argv += ["--resume-from", str(resume)] if resume is not None else []
        data_root = data_root or self.data_root
        argv += ["--data-root", data_root] if data_root else []
        start = time.time()
        with open(self.out / f"{name}.log", "w") as log:
            code = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=steps.checkout_root(), check=False
            ).returncode
        self.lines.append(f"| `{' '.join(argv[1:])}` | {machine} | {code} | {time.time() - start:.0f} |")
        problems = returned_violations(out, self.terms)
        self.check(f"{name}: the returned files keep the terms", not problems, "; ".join(problems))
        return code, out

    def command_until_done(self, name: str, machine: str, seconds: float, **kwargs) -> tuple[int, int]:
        """Runs the same command again while it exits 2 having packed what is done (the run goes on; an error of
        its arguments also exits 2, packing nothing), for at most ``seconds``; returns its last exit code and the
        number of calls (``name``, then ``name.2``, ...)."""
        start, calls = time.time(), 0
        while True:
            calls += 1
            wait = min(self.terms.max_wait, max(0.0, seconds - (time.time() - start)))
            code, out = self.command(name if calls == 1 else f"{name}.{calls}", machine, wait=wait, **kwargs)
            going_on = code == 2 and out.is_dir() and any(out.iterdir())
            if not going_on or time.time() - start >= seconds:
                return code, calls

    def helper(self, name: str, argv: list[str]) -> int:
        """Runs a command of the runbook here (between the sessions), logged as ``name``."""
        with open(self.out / f"{name}.log", "w") as log:
            code = subprocess.run(
                [sys.executable, "-m", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=steps.checkout_root(),
                check=False,
            ).returncode
        self.lines.append(f"| `-m {' '.join(argv)}` | here | {code} | |")
        return code

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


def _patients(dataset: Path) -> set[str]:
    """The ACDC patients (``patientNNN``) whose files are in ``dataset``, by folder or file name."""
    return {
        match.group(0)
        for path in dataset.rglob("*")
        if path.is_file()
        for part in path.relative_to(dataset).parts
        if (match := re.match(r"patient\d+", part))
    }


def _pretrained(work: Path) -> bool:
    statuses = [read_status(p.parent).get("status") for p in work.glob(f"results/*/pretrain/*/{STATUS_FILE}")]
    return len(statuses) == 2 and set(statuses) == {"finished"}


def _signal_worker(work: Path, signum: int) -> None:
    """Sends ``signum`` to the worker of ``work`` and every process of its session."""
    os.killpg(os.getpgid(int((work / LOCK_FILE).read_text())), signum)


def _give_back(work: Path) -> None:
    """Ends the worker of ``work`` and every process of its session, as giving the machine back does."""
    _signal_worker(work, signal.SIGKILL)
    _wait_for(lambda: not worker_running(work), 60)


def _paper_width_travel(checkout: int, terms: SessionTerms = TERMS) -> tuple[bool, str]:
    """
    Whether the calls of a second session of a GPU run at the paper's width are each within ``terms.tree_bytes``, and
    the plan that says so or why none does: the ACDC payload cut to the fine-tuning's patients (as measured,
    docs/gpu_run.md) in as few parts as fit (:py:func:`experiments.gpu_session.terms.session_calls`): the first call
    carries this checkout, the carry (the two finished encoders as bfloat16, their parameters counted here) and one
    part, each later one the checkout and one part, the last also the wheels, the manifest and 1 MiB of results.
    """
    network = BasicUNet(spatial_dims=2, in_channels=1, out_channels=4, features=PAPER.common["features"])
    encoder = sum(v.numel() for k, v in network.state_dict().items() if k.startswith(ENCODER_PREFIXES))
    encoders = 2 * 2 * encoder
    sums = (
        f"checkout {checkout / MIB:.1f} + wheels {WHEELS_BYTES / MIB:.1f} + ACDC cut to the fine-tuning's patients "
        f"{CUT_PAYLOAD_BYTES / MIB:.1f} + two bfloat16 encoders {encoders / MIB:.1f} + results 1.0 MiB"
    )
    return _calls_check(sums, checkout, CUT_PAYLOAD_BYTES, terms, carry=encoders)


def _first_session_travel(checkout: int, terms: SessionTerms = TERMS) -> tuple[bool, str]:
    """
    Whether the calls of a first session (a new pre-training seed: the whole ACDC payload travels) are each within
    ``terms.tree_bytes``, and the plan that says so or why none does: the payload in as few parts as fit
    (:py:func:`experiments.gpu_session.terms.session_calls`), each call but the last carrying this checkout and one
    part, the last the checkout, the wheels, its part, the manifest and 1 MiB of results.
    """
    sums = (
        f"checkout {checkout / MIB:.1f} + wheels {WHEELS_BYTES / MIB:.1f} + ACDC {FULL_PAYLOAD_BYTES / MIB:.1f} "
        "+ results 1.0 MiB"
    )
    return _calls_check(sums, checkout, FULL_PAYLOAD_BYTES, terms)


def _calls_check(sums: str, checkout: int, payload: int, terms: SessionTerms, carry: int = 0) -> tuple[bool, str]:
    """The check of a session's calls: whether :py:func:`session_calls` finds a plan, and ``sums`` with it."""
    try:
        plan = session_calls(checkout, WHEELS_BYTES, payload, MIB, terms.tree_bytes, carry=carry)
    except ValueError as error:
        return False, f"{sums}: {error}"
    split = "" if len(plan.parts) == 1 else f" (offline_payload split --parts {len(plan.parts)})"
    return True, f"{sums}: {plan.describe()}{split}"


def rehearse(out: Path, data_root: str | None = None, terms: SessionTerms = TERMS) -> int:
    """
    Runs the rehearsal into ``out`` (an empty or new folder); returns 0 when every check passes, else 1.

    Args:
        out: the rehearsal's folder (machines' work folders, each command's output folder, ``rehearsal.md``).
        data_root: a folder holding ``acdc/`` (e.g. a few real patients); None: a synthetic dataset.
        terms: the limits every command runs under and every returned folder and travel is checked against.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} is not empty: the rehearsal needs a new folder.")
    out.mkdir(parents=True, exist_ok=True)
    run = _Rehearsal(out, data_root, terms)
    machine_a, machine_b = run.out / "machine-a", run.out / "machine-b"

    code, _ = run.command("command-1", "machine-a", wait=0)
    run.check("command-1 starts the run and returns while it goes on", code == 2, f"exit code {code}")
    started = _wait_for(lambda: _pretrained(machine_a) and bool(_finished_cells(machine_a)), _STAGE_SECONDS)
    run.check("both pre-trainings and a fine-tuning cell finish on machine A", started)
    if worker_running(machine_a):
        _signal_worker(machine_a, signal.SIGSTOP)  # frozen mid-run while the command packs, then given back
    code, returned = run.command("command-2", "machine-a", wait=0)
    run.check("command-2 only collects while the run goes on (exit code 2)", code == 2, f"exit code {code}")
    if worker_running(machine_a):
        _give_back(machine_a)

    carry, payload = run.out / "carry", run.out / "payload" / "acdc.tar.xz"
    code = run.helper(
        "make-carry",
        ["experiments.gpu_session", "--make-carry", str(returned), "--out", str(carry), *terms.as_options()],
    )
    run.check("what came back is packed again to be carried", code == 0, f"exit code {code}")
    data_a = Path(run.data_root) if run.data_root else machine_a / "data"
    cut = [
        "experiments.gpu_session.offline_payload",
        "pack",
        str(data_a / "acdc"),
        str(payload),
        "--patients-of",
        str(returned),
    ]
    code = run.helper("cut-payload", cut)
    data_b = run.out / "machine-b-data"
    code = code or run.helper(
        "unpack-payload", ["experiments.gpu_session.offline_payload", "unpack", str(payload), str(data_b / "acdc")]
    )
    patients_a, patients_b = _patients(data_a / "acdc"), _patients(data_b / "acdc")
    run.check(
        "the dataset travels cut to the fine-tuning's patients",
        code == 0 and 0 < len(patients_b) < len(patients_a),
        f"{len(patients_b)} of {len(patients_a)} patients",
    )
    packed = json.loads((carry / STATE_FILE).read_text())["returned"]["packed"]
    # the cells whose results came back (a cell finished on A after command-2 packed is lost with the machine)
    done_on_a = {Path(p).parent.parent.name for p in packed if p.endswith("/eval/dice.json")}
    root = steps.checkout_root()
    sizes = travel_bytes(root) if root is not None and (root / ".git").exists() else {"total": 0}
    wheels = root / ".offline" / "wheels" if root is not None else None
    wheel_bytes = sum(p.stat().st_size for p in wheels.rglob("*") if p.is_file()) if wheels and wheels.is_dir() else 0
    carried = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file())
    total = sizes["total"] + wheel_bytes + payload.stat().st_size + carried
    run.check(
        "what travels to machine B (checkout, wheels, cut dataset, carried files) is within the working tree's limit",
        total <= terms.tree_bytes,
        f"checkout {sizes['total'] / MIB:.1f} MiB + wheels {wheel_bytes / MIB:.1f} MiB + dataset "
        f"{payload.stat().st_size / MIB:.2f} MiB + carried {carried / MIB:.2f} MiB = {total / MIB:.1f} MiB "
        f"(limit {terms.tree_bytes / MIB:.0f} MiB)",
    )
    run.check(
        "a first session's calls (the checkout with the whole ACDC payload in parts, the last call with the wheels "
        "and results) are each within the limit",
        *_first_session_travel(sizes["total"], terms),
    )
    run.check(
        "at the paper's width, a second session's calls (the checkout with the ACDC payload cut to the fine-tuning's "
        "patients in parts, the first call with the two encoders, the last with the wheels and results) are each "
        "within the limit",
        *_paper_width_travel(sizes["total"], terms),
    )
    shutil.rmtree(machine_a)  # the machine went back with its disk: nothing of it but the carry reaches B
    code, calls = run.command_until_done("command-3", "machine-b", _STAGE_SECONDS, resume=carry, data_root=str(data_b))
    run.check(
        "command-3 resumes on machine B and finishes the run", code == 0, f"exit code {code} after {calls} call(s)"
    )
    state = RunState(machine_b).read()
    run.check("the run took two machines", state["machines"] == 2, f"machines {state['machines']}")
    budget = get_budget("rehearse")
    folder = steps.experiment(machine_b, budget, data_b).folder
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
    travelled = sorted(p for p in packed if p.endswith("encoder.pt" + BF16_SUFFIX))
    pretrained_again = [m for m in ("simclr", "gcl") if f"pretrain {m}: starting" in log]
    run.check(
        "the encoders reached machine B as bfloat16 and no pre-training ran again there",
        len(travelled) == 2
        and not pretrained_again
        and all((machine_b / p[: -len(BF16_SUFFIX)]).exists() for p in travelled),
        f"carried: {', '.join(travelled) or 'none'}; pre-trained again: {', '.join(pretrained_again) or 'none'}",
    )
    final = run.out / ("command-3" if calls == 1 else f"command-3.{calls}")
    collected = run.out / "collected"
    code = run.helper("collect", ["experiments.gpu_session", "--collect", str(final), "--out", str(collected)])
    cards = sorted(p.name for p in (collected / ENCODERS).glob("*.json"))
    run.check(
        "the pre-trained encoders come back as kept encoder cards, collected into encoders/",
        code == 0 and cards == ["gcl.json", "simclr.json"] and (collected / ENCODERS / "gcl.pt").is_file(),
        f"exit code {code}; cards: {', '.join(cards) or 'none'}",
    )
    return 0 if run.write() else 1
