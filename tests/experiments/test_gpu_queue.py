"""benchmarks/gpu_queue.sh, the fine-tuning rounds' jobs on a time-limited GPU session, with round 8's jobs
(docs/results/finetune-curves-r8_acdc/gpu_jobs.sh): every fold trained, then scored on validation and on the test
patients, the rows packed into ``$OUT/rows.tar.gz`` at their paths in the checkout; a call that runs out of time
exits 2 with the jobs going on, the next call starts nothing twice, a failed job is started again, at most
``SLOTS`` jobs run at once, in the order given. ``python3`` is a stand-in that logs each call, leaves the files a
real run would and holds a fold as long as ``HOLD<fold>`` exists."""

import csv
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUEUE = Path("benchmarks/gpu_queue.sh")
ROUND_JOBS = Path("benchmarks/gpu_finetune_jobs.sh")
ROUND8 = Path("docs/results/finetune-curves-r8_acdc/gpu_jobs.sh")
PLAN = "docs/results/finetune-curves-r8_acdc"
GATE = "docs/results/gate-fullsup_acdc"

STAND_IN = f"""#!{sys.executable}
import csv, os, sys, time
args = sys.argv[1:]
if args[0] == "-":  # the script's own inline Python
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
module, rest = args[1], args[2:]
def value(key):
    return rest[rest.index(key) + 1]
def log(line):
    with open(os.environ["CALLS"], "a") as f:
        f.write(line + "\\n")
if module == "benchmarks.finetune_curves" and rest[0] == "times":
    with open(os.path.join(rest[1], "times.csv"), "w") as f:
        f.write("run,epoch,seconds\\n" + os.path.basename(rest[1]) + ",1,2.0\\n")
elif module == "benchmarks.finetune_curves":
    fold = value("--fold")
    drawn = ""
    if "--draw" in rest:  # a few-label run: its labelled set and its own --out folder
        drawn = f" L{{value('--labeled')}} d{{value('--draw')}} {{os.path.basename(value('--out'))}}"
    log(f"train {{fold}} {{value('--iterations')}} {{value('--device')}} {{value('--recipe')}}{{drawn}}")
    active = os.environ["CALLS"] + ".active"
    os.makedirs(active, exist_ok=True)
    marker = os.path.join(active, value("--out").replace(os.sep, "_"))  # one a run: a fold may have several
    open(marker, "w").close()
    with open(os.environ["CALLS"] + ".peak", "a") as f:  # the trainings running when this one started
        f.write(f"{{fold}} {{len(os.listdir(active))}}\\n")
    time.sleep(float(os.environ.get("TRAIN_SECONDS", "0")))
    while os.path.exists(os.environ["HOLD"] + fold):
        time.sleep(0.1)
    os.remove(marker)
    failed = os.environ["FAIL"] + fold
    if os.path.exists(failed):
        os.remove(failed)
        sys.exit("run failed")
    run = os.path.join(value("--out"), "runs", "run")
    os.makedirs(run, exist_ok=True)
    for name in ("log.txt", "command.json"):
        open(os.path.join(run, name), "w").close()
    with open(os.path.join(value("--out"), "curves.csv"), "w") as f:
        f.write("fold,recipe,iteration,val_dice\\n" + fold + ",r,2,0.5\\n")
elif module == "benchmarks.score_val":
    plan, split = rest[1], value("--split")
    models = [rest[i + 1] for i, a in enumerate(rest) if a == "--model"]
    scorings = [rest[i + 1].split("=")[0] for i, a in enumerate(rest) if a == "--scoring"]
    log(f"score {{os.path.basename(plan)}} {{split}} {{' '.join(models)}} {{' '.join(sorted(scorings))}}")
    target = os.path.join(plan, f"dice_{{split}}.csv")
    rows = list(csv.reader(open(target)))[1:] if os.path.exists(target) else []
    rows += [[m, s] for m in models for s in scorings if [m, s] not in rows]
    with open(target, "w") as f:
        f.write("model,scoring\\n" + "".join(f"{{m}},{{s}}\\n" for m, s in rows))
"""


def _rows(out: Path) -> dict[str, list[dict]]:
    """The CSV files of ``rows.tar.gz``, by their path in the checkout."""
    with tarfile.open(out / "rows.tar.gz") as tar:
        return {
            m.name.removeprefix("./"): list(csv.DictReader(io.TextIOWrapper(tar.extractfile(m))))
            for m in tar.getmembers()
            if m.isfile()
        }


def _checkout(tmp_path: Path, *rounds: Path) -> Path:
    """The queue, round 8's jobs and those of ``rounds`` in a copy of the folders they write to, and the stand-in on
    the PATH."""
    root = tmp_path / "checkout"
    for path in (QUEUE, ROUND_JOBS, ROUND8, *rounds):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, root / path)
    (root / GATE).mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text(STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return root


def _call(tmp_path: Path, seconds: int, *rounds: str, **env_vars: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("REHEARSE", "WORK", "OUT", "GCL_DATA_ROOT", "SLOTS")}
    env.update(
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        CALLS=str(tmp_path / "calls.txt"),
        HOLD=str(tmp_path / "hold"),
        FAIL=str(tmp_path / "fail"),
        OUT=str(tmp_path / "out"),
        WORK=str(tmp_path / "work"),
        GCL_DATA_ROOT="DATA",
        **env_vars,
    )
    cmd = ["bash", str(QUEUE), str(seconds), *(rounds or [str(ROUND8)])]
    # the queue's wait, then its packing: a bound that fails a hung call, not a slow machine
    return subprocess.run(
        cmd, cwd=tmp_path / "checkout", env=env, capture_output=True, text=True, timeout=seconds + 120
    )


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def _model(fold: int) -> str:
    return f"r8g_f{fold}_batch20_grid192"


def test_every_fold_is_trained_scored_and_packed_once(tmp_path):
    _checkout(tmp_path)
    proc = _call(tmp_path, 60)
    assert proc.returncode == 0, proc.stderr
    calls = _calls(tmp_path)
    assert sorted(c for c in calls if c.startswith("train")) == [
        f"train {k} 2500 cuda batch20_grid192_gpu" for k in range(5)
    ]
    for k in range(5):  # each fold scored after its training: validation under three scorings, test under two
        val = calls.index(f"score finetune-curves-r8_acdc val {_model(k)} bilinear fullsup nearest")
        test = calls.index(f"score gate-fullsup_acdc test {_model(k)} fullsup nearest")
        assert calls.index(f"train {k} 2500 cuda batch20_grid192_gpu") < val < test
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["logs.tar.gz", "rows.tar.gz"]  # within the 8 files
    rows = _rows(out)
    assert sorted(rows) == [
        f"{PLAN}/curves_gpu.csv",
        f"{PLAN}/dice_val.csv",
        f"{PLAN}/times_gpu.csv",
        f"{GATE}/dice_test.csv",
    ]
    assert sorted(r["fold"] for r in rows[f"{PLAN}/curves_gpu.csv"]) == ["0", "1", "2", "3", "4"]  # one header
    assert len(rows[f"{PLAN}/times_gpu.csv"]) == 5
    test_rows = rows[f"{GATE}/dice_test.csv"]
    assert len(test_rows) == 10 and {r["scoring"] for r in test_rows} == {"fullsup", "nearest"}
    with tarfile.open(out / "logs.tar.gz") as logs:
        names = logs.getnames()
    assert "./jobs/r8g_f0_batch20_grid192.scored" in names
    assert "./train/f3/runs/run/log.txt" in names
    assert [line for line in proc.stdout.splitlines() if line.startswith("r8g")][-5:] == [
        f"{_model(k)}: scored" for k in range(5)
    ]
    again = _call(tmp_path, 5)
    assert again.returncode == 0 and "started" not in again.stdout
    assert [c for c in _calls(tmp_path)[len(calls) :] if c.startswith("train")] == []  # nothing trained twice


@pytest.fixture
def hold(tmp_path):
    """A fold held while the file exists, released at the end of the test whatever its outcome (the fold's
    stand-in runs on in its own session)."""
    path = tmp_path / "hold3"
    path.touch()
    yield path
    path.unlink(missing_ok=True)


def test_a_call_out_of_time_leaves_the_jobs_going_and_the_next_one_packs_them(tmp_path, hold):
    _checkout(tmp_path)
    first = _call(tmp_path, 3)
    assert first.returncode == 2, first.stderr
    assert f"{_model(3)}: running" in first.stdout and f"{_model(0)}: scored" in first.stdout
    assert "r8g_f3" not in {r["model"] for r in _rows(tmp_path / "out")[f"{GATE}/dice_test.csv"]}
    hold.unlink()  # fold 3's run goes on between the calls and ends
    second = _call(tmp_path, 60)
    assert second.returncode == 0 and "started" not in second.stdout
    assert sum(c.startswith("train 3 ") for c in _calls(tmp_path)) == 1
    assert _model(3) in {r["model"] for r in _rows(tmp_path / "out")[f"{GATE}/dice_test.csv"]}


def test_a_checkout_replaced_between_calls_loses_no_rows(tmp_path):
    root = _checkout(tmp_path)
    assert _call(tmp_path, 60).returncode == 0
    for tracked in (f"{PLAN}/dice_val.csv", f"{GATE}/dice_test.csv"):
        (root / tracked).unlink()  # the next call's working tree: the committed files
    assert _call(tmp_path, 5).returncode == 0
    assert len(_rows(tmp_path / "out")[f"{PLAN}/dice_val.csv"]) == 15  # every scored fold: 5 models, 3 scorings


def test_a_failed_job_is_reported_and_started_again_by_the_next_call(tmp_path):
    _checkout(tmp_path)
    (tmp_path / "fail2").touch()
    first = _call(tmp_path, 60)
    assert first.returncode == 2 and f"{_model(2)}: failed" in first.stdout
    assert not any("r8g_f2" in c for c in _calls(tmp_path) if c.startswith("score"))
    second = _call(tmp_path, 60)
    assert second.returncode == 0 and f"{_model(2)}: started" in second.stdout
    assert f"{_model(0)}: started" not in second.stdout
    assert sum(c.startswith("train 2 ") for c in _calls(tmp_path)) == 2


def test_the_rehearsal_runs_fold_0_briefly_on_the_cpu(tmp_path):
    _checkout(tmp_path)
    proc = _call(tmp_path, 60, REHEARSE="1")
    assert proc.returncode == 0, proc.stderr
    assert [c for c in _calls(tmp_path) if c.startswith("train")] == ["train 0 2 cpu batch20_grid192_gpu"]


def test_jobs_scored_in_an_earlier_session_are_not_run_again_and_their_rows_stay(tmp_path):
    root = _checkout(tmp_path)
    (tmp_path / "fail2").touch()
    assert _call(tmp_path, 60).returncode == 2  # fold 2 failed; the machine then goes back
    with tarfile.open(tmp_path / "out" / "rows.tar.gz") as tar:  # the returned rows committed (docs/gpu_run.md)
        tar.extractall(root, filter="data")
    shutil.rmtree(tmp_path / "work")
    shutil.rmtree(tmp_path / "out")
    before = len(_calls(tmp_path))
    proc = _call(tmp_path, 60)  # the next GPU session, on a fresh machine
    assert proc.returncode == 0, proc.stderr
    assert [c for c in _calls(tmp_path)[before:] if c.startswith("train")] == ["train 2 2500 cuda batch20_grid192_gpu"]
    for k in (0, 1, 3, 4):
        assert f"{_model(k)}: scored in an earlier session" in proc.stdout
    rows = _rows(tmp_path / "out")
    assert len(rows[f"{PLAN}/dice_val.csv"]) == 15  # the earlier folds' rows kept beside fold 2's
    assert sorted(r["fold"] for r in rows[f"{PLAN}/curves_gpu.csv"]) == ["0", "1", "2", "3", "4"]  # none twice


SECOND_ROUND = """JOBS=(second_a second_b)
job_run() { python3 -m benchmarks.finetune_curves --fold "${1#second_}" --iterations 9 --device cuda --recipe second \\
    --out "$WORK/second/$1"; }
job_committed() { false; }
job_pack() { local rows="$1"; mkdir -p "$rows/docs/second"; shift 2
    printf '%s\\n' "$@" > "$rows/docs/second/jobs.txt"; }
"""


def test_at_most_slots_jobs_run_at_once_in_the_order_given_across_rounds(tmp_path):
    root = _checkout(tmp_path)
    (root / "second.sh").write_text(SECOND_ROUND)
    proc = _call(tmp_path, 60, str(ROUND8), "second.sh", SLOTS="2", TRAIN_SECONDS="0.5")
    assert proc.returncode == 0, proc.stderr
    started = [line.split(":")[0] for line in proc.stdout.splitlines() if line.endswith("Z)")]
    assert started == [_model(k) for k in range(5)] + ["second_a", "second_b"]
    assert sorted(c.split()[1] for c in _calls(tmp_path) if c.startswith("train")) == [
        "0",
        "1",
        "2",
        "3",
        "4",
        "a",
        "b",
    ]
    assert sorted(_rows(tmp_path / "out")) == sorted(
        [f"{PLAN}/curves_gpu.csv", f"{PLAN}/dice_val.csv", f"{PLAN}/times_gpu.csv", f"{GATE}/dice_test.csv",
         "docs/second/jobs.txt"]
    )  # fmt: skip
    peaks = [int(line.split()[1]) for line in (tmp_path / "calls.txt.peak").read_text().splitlines()]
    assert len(peaks) == 7 and max(peaks) == 2  # two at once, never three


@pytest.mark.parametrize(
    ("rounds", "message"),
    [(("missing.sh",), "missing.sh is not a file"), ((str(ROUND8), str(ROUND8)), "is listed twice")],
)
def test_a_round_file_missing_or_listed_twice_is_refused(tmp_path, rounds, message):
    _checkout(tmp_path)
    proc = _call(tmp_path, 5, *rounds)
    assert proc.returncode == 1 and message in proc.stderr
    assert _calls(tmp_path) == []


ROUND10 = Path("docs/results/finetune-width-r10_acdc/gpu_jobs.sh")
PLAN10 = "docs/results/finetune-width-r10_acdc"


def test_round_10_runs_after_round_8_and_returns_its_own_rows(tmp_path):
    _checkout(tmp_path, ROUND10)
    proc = _call(tmp_path, 60, str(ROUND8), str(ROUND10))
    assert proc.returncode == 0, proc.stderr
    started = [line.split(":")[0] for line in proc.stdout.splitlines() if line.endswith("Z)")]
    assert started == [_model(k) for k in range(5)] + [f"r10g_f{k}_batch20_width512_L2_d0" for k in range(5)]
    calls = _calls(tmp_path)
    assert sorted(c for c in calls if "batch20_width512_gpu" in c) == [
        f"train {k} 1500 cuda batch20_width512_gpu L2 d0 f{k}" for k in range(5)
    ]
    for k in range(5):  # validation only, one scoring
        assert f"score finetune-width-r10_acdc val r10g_f{k}_batch20_width512_L2_d0 bilinear" in calls
    rows = _rows(tmp_path / "out")
    assert {r["model"] for r in rows[f"{PLAN10}/dice_val.csv"]} == {
        f"r10g_f{k}_batch20_width512_L2_d0" for k in range(5)
    }
    assert len(rows[f"{PLAN10}/curves_gpu.csv"]) == 5 and len(rows[f"{PLAN}/curves_gpu.csv"]) == 5


ROUND11 = Path("docs/results/finetune-budget-r11_acdc/gpu_jobs.sh")
PLAN11 = "docs/results/finetune-budget-r11_acdc"


def test_round_11_runs_before_round_10_scores_test_in_the_gate_and_names_the_listed_models(tmp_path):
    _checkout(tmp_path, ROUND11, ROUND10)
    proc = _call(tmp_path, 60, str(ROUND11), str(ROUND10))
    assert proc.returncode == 0, proc.stderr
    started = [line.split(":")[0] for line in proc.stdout.splitlines() if line.endswith("Z)")]
    jobs11 = [f"r11g_f{k}_batch20_grid192_it5000" for k in range(5)]
    assert started == jobs11 + [f"r10g_f{k}_batch20_width512_L2_d0" for k in range(5)]
    calls = _calls(tmp_path)
    for k, job in enumerate(jobs11):  # 5000 iterations, then validation under two scorings, test under two
        train = calls.index(f"train {k} 5000 cuda batch20_grid192_it5000_gpu")
        val = calls.index(f"score finetune-budget-r11_acdc val {job} bilinear fullsup")
        test = calls.index(f"score gate-fullsup_acdc test {job} fullsup nearest")
        assert train < val < test
    rows = _rows(tmp_path / "out")
    assert {r["model"] for r in rows[f"{PLAN11}/dice_val.csv"]} == set(jobs11)
    assert {r["model"] for r in rows[f"{GATE}/dice_test.csv"]} == set(jobs11)
    assert len(rows[f"{PLAN11}/curves_gpu.csv"]) == 5 and len(rows[f"{PLAN10}/curves_gpu.csv"]) == 5
    for plan, set_name in ((PLAN11, "it5000_gpu"), (GATE, "grid192_it5000_gpu")):  # the models the reading keys on
        with (REPO / plan / "models.csv").open() as f:
            listed = {r["model"]: r["run_dir"] for r in csv.DictReader(f) if r["set"] == set_name}
        assert listed == {  # the driver's run folder: f<fold>_<recipe>_L<labeled>_d<draw>_s<seed> under its --out
            job: f"train-r11/f{k}/runs/f{k}_batch20_grid192_it5000_gpu_Lfull_d0_s0" for k, job in enumerate(jobs11)
        }


GATES = Path("docs/results/gate-random_acdc/gpu_jobs.sh")
GATE_RANDOM = "docs/results/gate-random_acdc"


def test_the_random_gates_run_twenty_jobs_each_with_its_draw_and_return_both_splits(tmp_path):
    _checkout(tmp_path, GATES)
    proc = _call(tmp_path, 60, str(GATES), SLOTS="8")
    assert proc.returncode == 0, proc.stderr
    with (REPO / GATE_RANDOM / "models.csv").open() as f:
        listed = [r for r in csv.DictReader(f)]
    cpu = [r for r in listed if r["set"] in ("L1", "L2")]
    gpu = {r["model"]: r for r in listed if r["set"] in ("L1_gpu", "L2_gpu")}
    started = [line.split(":")[0] for line in proc.stdout.splitlines() if line.endswith("Z)")]
    assert started == ["rgg_" + r["model"].removeprefix("rg_") for r in cpu]  # the CPU set's models, in its order
    calls = _calls(tmp_path)
    for job in started:
        fold, labeled, draw = job.split("_f")[1][0], job.split("_L")[1][0], job[-1]
        assert gpu[job]["set"] == f"L{labeled}_gpu" and gpu[job]["fold"] == fold
        # the driver's run folder, f<fold>_<recipe>_L<labeled>_d<draw>_s<seed>, under the job's own --out
        out = job.removeprefix("rgg_")
        assert gpu[job]["run_dir"] == f"train-rg/{out}/runs/f{fold}_fewlabel_gpu_L{labeled}_d{draw}_s0"
        train = calls.index(f"train {fold} 1500 cuda fewlabel_gpu L{labeled} d{draw} {out}")
        val = calls.index(f"score gate-random_acdc val {job} bilinear")
        test = calls.index(f"score gate-random_acdc test {job} bilinear")
        assert train < val < test
    rows = _rows(tmp_path / "out")
    for split in ("val", "test"):
        assert {r["model"] for r in rows[f"{GATE_RANDOM}/dice_{split}.csv"]} == set(started)
    assert len(rows[f"{GATE_RANDOM}/curves_gpu.csv"]) == 20


def test_a_round_whose_packing_fails_returns_nothing_and_the_others_still_come_back(tmp_path):
    root = _checkout(tmp_path)
    failing = SECOND_ROUND.replace(
        "job_pack() {", 'job_pack() { [ -f "$PACK_OK" ] || { mkdir -p "$1/docs/half"; false; };'
    )
    (root / "second.sh").write_text(failing)
    first = _call(tmp_path, 60, str(ROUND8), "second.sh", PACK_OK=str(tmp_path / "pack_ok"))
    assert first.returncode == 2 and "second.sh: packing failed" in first.stdout
    rows = _rows(tmp_path / "out")
    assert f"{PLAN}/dice_val.csv" in rows and not any(name.startswith("docs/half") for name in rows)
    (tmp_path / "pack_ok").touch()
    second = _call(tmp_path, 60, str(ROUND8), "second.sh", PACK_OK=str(tmp_path / "pack_ok"))
    assert second.returncode == 0 and "started" not in second.stdout
    assert "docs/second/jobs.txt" in _rows(tmp_path / "out")
