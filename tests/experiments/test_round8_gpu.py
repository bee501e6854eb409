"""docs/results/finetune-curves-r8_acdc/gpu.sh, round 8 on a time-limited GPU session: every fold trained at once,
then scored on validation and on the test patients, the rows packed into ``$OUT``; a call that runs out of time
exits 2 with the folds going on, the next call starts nothing twice, and a failed fold is started again. ``python3``
is a stand-in that logs each call, leaves the files a real run would and holds a fold as long as ``HOLD`` exists."""

import csv
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path("docs/results/finetune-curves-r8_acdc/gpu.sh")

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
    log(f"train {{fold}} {{value('--iterations')}} {{value('--device')}} {{value('--recipe')}}")
    while os.path.exists(os.environ["HOLD"] + fold):
        time.sleep(0.1)
    failed = os.environ["FAIL"] + fold
    if os.path.exists(failed):
        os.remove(failed)
        sys.exit("run failed")
    os.makedirs(value("--out"), exist_ok=True)
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


def _checkout(tmp_path: Path) -> Path:
    """The script in a copy of the folders it writes to (the plan's and the gate's), and the stand-in on the PATH."""
    root = tmp_path / "checkout"
    (root / SCRIPT).parent.mkdir(parents=True)
    shutil.copy(REPO / SCRIPT, root / SCRIPT)
    (root / "docs/results/gate-fullsup_acdc").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text(STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return root


def _call(tmp_path: Path, seconds: int, **env_vars: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("REHEARSE", "WORK", "OUT", "GCL_DATA_ROOT")}
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
    cmd = ["bash", str(SCRIPT), str(seconds)]
    return subprocess.run(cmd, cwd=tmp_path / "checkout", env=env, capture_output=True, text=True, timeout=120)


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_every_fold_is_trained_scored_and_packed_once(tmp_path):
    _checkout(tmp_path)
    proc = _call(tmp_path, 60)
    assert proc.returncode == 0, proc.stderr
    calls = _calls(tmp_path)
    assert sorted(c for c in calls if c.startswith("train")) == [
        f"train {k} 2500 cuda batch20_grid192_gpu" for k in range(5)
    ]
    for k in range(5):  # each fold scored after its training: validation under three scorings, test under two
        model = f"r8g_f{k}_batch20_grid192"
        val = calls.index(f"score finetune-curves-r8_acdc val {model} bilinear fullsup nearest")
        test = calls.index(f"score gate-fullsup_acdc test {model} fullsup nearest")
        assert calls.index(f"train {k} 2500 cuda batch20_grid192_gpu") < val < test
    out = tmp_path / "out"
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "curves_gpu.csv",
        "finetune-curves-r8_acdc_dice_val.csv",
        "gate-fullsup_acdc_dice_test.csv",
        "logs.tar.gz",
        "times_gpu.csv",
    ]  # within the 8 files that come back
    curves = list(csv.DictReader((out / "curves_gpu.csv").open()))
    assert sorted(r["fold"] for r in curves) == ["0", "1", "2", "3", "4"]  # one header, every fold's rows
    assert len(list(csv.DictReader((out / "times_gpu.csv").open()))) == 5
    test_rows = list(csv.DictReader((out / "gate-fullsup_acdc_dice_test.csv").open()))
    assert len(test_rows) == 10 and {r["scoring"] for r in test_rows} == {"fullsup", "nearest"}
    with tarfile.open(out / "logs.tar.gz") as logs:
        assert "jobs/f0.scored" in logs.getnames()
    assert [line for line in proc.stdout.splitlines() if line.startswith("fold")][-5:] == [
        f"fold {k}: scored" for k in range(5)
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


def test_a_call_out_of_time_leaves_the_folds_going_and_the_next_one_packs_them(tmp_path, hold):
    _checkout(tmp_path)
    first = _call(tmp_path, 3)
    assert first.returncode == 2, first.stderr
    assert "fold 3: running" in first.stdout and "fold 0: scored" in first.stdout
    assert "r8g_f3" not in (tmp_path / "out" / "gate-fullsup_acdc_dice_test.csv").read_text()
    hold.unlink()  # fold 3's run goes on between the calls and ends
    second = _call(tmp_path, 60)
    assert second.returncode == 0 and "started" not in second.stdout
    assert sum(c.startswith("train 3 ") for c in _calls(tmp_path)) == 1
    assert "r8g_f3" in (tmp_path / "out" / "gate-fullsup_acdc_dice_test.csv").read_text()


def test_a_checkout_replaced_between_calls_loses_no_rows(tmp_path):
    root = _checkout(tmp_path)
    assert _call(tmp_path, 60).returncode == 0
    for tracked in ("finetune-curves-r8_acdc/dice_val.csv", "gate-fullsup_acdc/dice_test.csv"):
        (root / "docs/results" / tracked).unlink()  # the next call's working tree: the committed files
    assert _call(tmp_path, 5).returncode == 0
    rows = list(csv.DictReader((tmp_path / "out" / "finetune-curves-r8_acdc_dice_val.csv").open()))
    assert len(rows) == 15  # collected again from every scored fold: 5 models, 3 scorings


def test_a_failed_fold_is_reported_and_started_again_by_the_next_call(tmp_path):
    _checkout(tmp_path)
    (tmp_path / "fail2").touch()
    first = _call(tmp_path, 60)
    assert first.returncode == 2 and "fold 2: failed" in first.stdout
    assert not any("r8g_f2" in c for c in _calls(tmp_path) if c.startswith("score"))
    second = _call(tmp_path, 60)
    assert second.returncode == 0 and "fold 2: started" in second.stdout and "fold 0: started" not in second.stdout
    assert sum(c.startswith("train 2 ") for c in _calls(tmp_path)) == 2


def test_the_rehearsal_runs_fold_0_briefly_on_the_cpu(tmp_path):
    _checkout(tmp_path)
    proc = _call(tmp_path, 60, REHEARSE="1")
    assert proc.returncode == 0, proc.stderr
    assert [c for c in _calls(tmp_path) if c.startswith("train")] == ["train 0 2 cpu batch20_grid192_gpu"]


def test_folds_scored_in_an_earlier_session_are_not_run_again(tmp_path):
    root = _checkout(tmp_path)
    (tmp_path / "fail2").touch()
    assert _call(tmp_path, 60).returncode == 2  # fold 2 failed; the machine then goes back
    for returned, tracked in (
        ("finetune-curves-r8_acdc_dice_val.csv", "finetune-curves-r8_acdc/dice_val.csv"),
        ("gate-fullsup_acdc_dice_test.csv", "gate-fullsup_acdc/dice_test.csv"),
    ):  # the returned rows committed, as docs/gpu_run.md's step 9 says
        shutil.copy(tmp_path / "out" / returned, root / "docs/results" / tracked)
    shutil.rmtree(tmp_path / "work")
    shutil.rmtree(tmp_path / "out")
    before = len(_calls(tmp_path))
    proc = _call(tmp_path, 60)  # the next GPU session, on a fresh machine
    assert proc.returncode == 0, proc.stderr
    assert [c for c in _calls(tmp_path)[before:] if c.startswith("train")] == ["train 2 2500 cuda batch20_grid192_gpu"]
    for k in (0, 1, 3, 4):
        assert f"fold {k}: scored in an earlier session" in proc.stdout
    rows = list(csv.DictReader((tmp_path / "out" / "finetune-curves-r8_acdc_dice_val.csv").open()))
    assert len(rows) == 15  # the earlier folds' rows kept beside fold 2's
