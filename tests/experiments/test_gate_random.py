"""docs/results/gate-random_{acdc,prostate}/run.sh: each plan's 20 jobs are the runs that its models.csv lists
(fold, L, draw, seed 0: the folds' own; recipe and width; the dataset's bundle), L = 2 first, and neither starts
without round 10's width. ``python`` is a stand-in that logs the driver's arguments."""

import csv
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLANS = {
    "acdc": (REPO / "docs/results/gate-random_acdc", []),
    "prostate": (
        REPO / "docs/results/gate-random_prostate",
        ["--bundle", "gcl_prostate", "--base-split", "docs/results/cpu-mini_prostate/split.json"],
    ),
}

STAND_IN = f"""#!{sys.executable}
import os, sys
with open(os.environ["CALLS"], "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
"""


def _run(tmp_path: Path, plan: Path, width: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    python.write_text(STAND_IN)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CALLS": str(tmp_path / "calls.txt"),
        "OUT": str(tmp_path / "out"),
        "WIDTH": width,
    }
    (tmp_path / "out").mkdir(exist_ok=True)
    cmd = ["bash", str(plan / "run.sh"), "A"]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def _value(args: list[str], key: str) -> str:
    return args[args.index(key) + 1]


@pytest.mark.parametrize("dataset", sorted(PLANS))
@pytest.mark.parametrize(
    ("width", "features", "recipe"),
    [("default", "[16,32,64,128,256,16]", "fewlabel"), ("paper", "[32,64,128,256,512,32]", "fewlabel_width512")],
)
def test_the_jobs_are_the_runs_of_models_csv(tmp_path, dataset, width, features, recipe):
    plan, bundle = PLANS[dataset]
    assert _run(tmp_path, plan, width).returncode == 0
    calls = [line.split() for line in (tmp_path / "calls.txt").read_text().splitlines()]
    folders = [
        f"f{_value(a, '--fold')}_{_value(a, '--recipe')}_L{_value(a, '--labeled')}_d{_value(a, '--draw')}_s0"
        for a in calls
    ]  # the run folder benchmarks/finetune_curves.py makes of them
    with (plan / "models.csv").open() as f:
        listed = [Path(row["run_dir"]).name.replace("fewlabel", recipe) for row in csv.DictReader(f)]
    assert folders == listed and len(set(folders)) == 20  # L = 2 first, as models.csv
    for args in calls:
        assert "--seed" not in args  # the driver's default, 0: the seed also decides the folds
        assert args[2 : 2 + len(bundle)] == bundle and ("--bundle" in args) == bool(bundle)  # the dataset's
        assert _value(args, "--features") == features and _value(args, "--iterations") == "1500"
        assert _value(args, "--val-every") == "250" and _value(args, "--batch_size") == "20"
        assert _value(args, "--amp") == "False"


@pytest.mark.parametrize("dataset", sorted(PLANS))
def test_no_width_no_run(tmp_path, dataset):
    proc = _run(tmp_path, PLANS[dataset][0], "")
    assert proc.returncode == 2 and "WIDTH must be default or paper" in proc.stderr
    assert not (tmp_path / "calls.txt").exists()
