"""docs/results/protocol_acdc/probe_test.sh, the test-split probe of stage C's encoders: every encoder and the random
ones probed once, ``JOBS`` at once, the table after the last; a missing encoder stops it before anything runs; a
rerun probes nothing again. ``python`` is a stand-in that logs each run's start and end and writes its probe.json."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark.drivers import most_at_once, run_driver

STAND_IN = f"""#!{sys.executable}
import os, sys, time
args = sys.argv[1:]
out = args[args.index("--output_dir") + 1] if "--output_dir" in args else args[2]
name = f"{{args[1]}} {{os.path.basename(out)}}"
with open(os.environ["CALLS"], "a") as log:
    log.write(f"start {{name}}\\n")
time.sleep(0.2)
if args[1] == "gcl_monai.probe":
    os.makedirs(out)
    open(os.path.join(out, "probe.json"), "w").close()
with open(os.environ["CALLS"], "a") as log:
    log.write(f"end {{name}}\\n")
"""
ENCODERS = [f"{m}{s}" for m in ("supervised_encoder", "simclr", "gcl") for s in ("", "_p1", "_p2")]


def _probe_test(tmp_path: Path, jobs: int) -> tuple[subprocess.CompletedProcess, list[str]]:
    cmd = ["bash", "docs/results/protocol_acdc/probe_test.sh", "DATA", str(tmp_path / "results"), "stageC"]
    return run_driver(tmp_path, STAND_IN, cmd, JOBS=str(jobs))


def _stage_c(tmp_path: Path, encoders: list[str]) -> None:
    experiment = tmp_path / "results" / "stageC"
    experiment.mkdir(parents=True)
    (experiment / "split.json").write_text("{}")
    for name in encoders:
        (experiment / "pretrain" / name).mkdir(parents=True)
        (experiment / "pretrain" / name / "encoder.pt").write_bytes(b"weights")


@pytest.mark.parametrize("jobs", [1, 2])
def test_every_encoder_is_probed_once_then_tabled(tmp_path, jobs):
    _stage_c(tmp_path, ENCODERS)
    proc, log = _probe_test(tmp_path, jobs)
    assert proc.returncode == 0, proc.stderr
    probes = [line.removeprefix("start gcl_monai.probe ") for line in log if line.startswith("start gcl_monai.probe ")]
    assert sorted(probes) == sorted([f"random_s{seed}" for seed in (0, 1, 2)] + ENCODERS)
    assert log[-2:] == ["start gcl_monai.probe.table probe_test.csv", "end gcl_monai.probe.table probe_test.csv"]
    assert most_at_once(log) == jobs

    proc, again = _probe_test(tmp_path, jobs)  # rerun: nothing probed again, the table rewritten
    assert proc.returncode == 0 and [line for line in again if line.startswith("start ")] == [
        "start gcl_monai.probe.table probe_test.csv"
    ]


def test_a_missing_encoder_stops_it_before_anything_runs(tmp_path):
    _stage_c(tmp_path, [e for e in ENCODERS if e != "gcl_p2"])
    proc, log = _probe_test(tmp_path, 2)
    assert proc.returncode == 1 and log == []
    assert "stageC/pretrain/gcl_p2/encoder.pt is not on this machine" in proc.stderr
    assert "REMAKE_ENCODERS=1" in proc.stderr
