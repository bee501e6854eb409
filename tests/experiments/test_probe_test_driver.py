"""docs/results/protocol_<DATA>/probe_test.sh (benchmarks/probe_test.sh), the test-split probe of stage C's encoders:
every encoder and the random ones probed once with the dataset's bundle and data, ``JOBS`` at once, the table after
the last; a missing encoder stops it before anything runs, naming the command (with stage A's recipe) that makes it
again; a rerun probes nothing again. ``python`` is a stand-in that logs each run's start and end and writes its
arguments as its probe.json."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experiments.drivers import most_at_once, run_driver

STAND_IN = f"""#!{sys.executable}
import json, os, sys, time
args = sys.argv[1:]
out = args[args.index("--output_dir") + 1] if "--output_dir" in args else args[2]
name = f"{{args[1]}} {{os.path.basename(out)}}"
with open(os.environ["CALLS"], "a") as log:
    log.write(f"start {{name}}\\n")
time.sleep(0.2)
if args[1] == "gcl_monai.probe":
    os.makedirs(out)
    with open(os.path.join(out, "probe.json"), "w") as probe:
        json.dump(args, probe)
with open(os.environ["CALLS"], "a") as log:
    log.write(f"end {{name}}\\n")
"""
ENCODERS = [f"{m}{s}" for m in ("supervised_encoder", "simclr", "gcl") for s in ("", "_p1", "_p2")]


# each dataset's wrapper: its stage A recipe, named in the command that makes missing encoders again
RECIPES = {"acdc": 'RECIPE="default"', "prostate": 'RECIPE="--pretrain-set epochs=60"'}


def _probe_test(tmp_path: Path, jobs: int, data: str = "acdc") -> tuple[subprocess.CompletedProcess, list[str]]:
    cmd = ["bash", f"docs/results/protocol_{data}/probe_test.sh", "DATA", str(tmp_path / "results"), "stageC"]
    return run_driver(tmp_path, STAND_IN, cmd, JOBS=str(jobs))


def _stage_c(tmp_path: Path, encoders: list[str], name: str = "stageC") -> None:
    experiment = tmp_path / "results" / name
    experiment.mkdir(parents=True)
    (experiment / "split.json").write_text("{}")
    for name in encoders:
        (experiment / "pretrain" / name).mkdir(parents=True)
        (experiment / "pretrain" / name / "encoder.pt").write_bytes(b"weights")


@pytest.mark.parametrize("data, jobs", [("acdc", 1), ("acdc", 2), ("prostate", 2)])
def test_every_encoder_is_probed_once_then_tabled(tmp_path, data, jobs):
    _stage_c(tmp_path, ENCODERS)
    proc, log = _probe_test(tmp_path, jobs, data)
    assert proc.returncode == 0, proc.stderr
    probes = [line.removeprefix("start gcl_monai.probe ") for line in log if line.startswith("start gcl_monai.probe ")]
    assert sorted(probes) == sorted([f"random_s{seed}" for seed in (0, 1, 2)] + ENCODERS)
    assert log[-2:] == ["start gcl_monai.probe.table probe_test.csv", "end gcl_monai.probe.table probe_test.csv"]
    assert most_at_once(log) == jobs
    out = tmp_path / "results" / f"cpu-protocol_{data}" / "probe_test"
    args = json.loads((out / "gcl_p1" / "probe.json").read_text())
    assert args[args.index("--config_file") + 1] == f"bundles/gcl_{data}/configs/pretrain.json"
    assert args[args.index("--dataset_dir") + 1] == f"DATA/{data}"
    assert args[args.index("--encoder") + 1] == str(
        tmp_path / "results" / "stageC" / "pretrain" / "gcl_p1" / "encoder.pt"
    )
    assert args[args.index("--eval") + 1] == "test"

    proc, again = _probe_test(tmp_path, jobs, data)  # rerun: nothing probed again, the table rewritten
    assert proc.returncode == 0 and [line for line in again if line.startswith("start ")] == [
        "start gcl_monai.probe.table probe_test.csv"
    ]


@pytest.mark.parametrize("data", ["acdc", "prostate"])
def test_a_missing_encoder_stops_it_before_anything_runs(tmp_path, data):
    _stage_c(tmp_path, [e for e in ENCODERS if e != "gcl_p2"])
    proc, log = _probe_test(tmp_path, 2, data)
    assert proc.returncode == 1 and log == []
    assert "stageC/pretrain/gcl_p2/encoder.pt is not on this machine" in proc.stderr
    assert f"REMAKE_ENCODERS=1 {RECIPES[data]} bash docs/results/protocol_{data}/run.sh" in proc.stderr


def test_an_unknown_dataset_is_refused_by_name(tmp_path):
    proc, log = run_driver(tmp_path, STAND_IN, ["bash", "benchmarks/probe_test.sh", "heart", "DATA", "results"])
    assert proc.returncode == 2 and log == []
    assert "no bundle bundles/gcl_heart for DATA=heart" in proc.stderr


def test_the_converged_run_is_probed_into_its_own_folder(tmp_path):
    """docs/results/cpu-converged_acdc/probe_test.sh: the encoders of amendment 4's experiment, its split, rows in
    its own folder (not stage C's); a missing encoder names the restore command that brings it back from its card."""
    cmd = ["bash", "docs/results/cpu-converged_acdc/probe_test.sh", "DATA", str(tmp_path / "results")]
    _stage_c(tmp_path, [e for e in ENCODERS if e != "simclr_p1"], name="cpu-converged_acdc")
    proc, log = run_driver(tmp_path, STAND_IN, cmd, JOBS="2")
    assert proc.returncode == 1 and log == []
    experiment = tmp_path / "results" / "cpu-converged_acdc"
    assert f"{experiment}/pretrain/simclr_p1/encoder.pt is not on this machine" in proc.stderr
    assert (
        "python -m experiments restore docs/results/cpu-converged_acdc/kept/cpu-converged_acdc.tar.xz "
        f"{experiment} --encoders docs/results/cpu-converged_acdc/encoders" in proc.stderr
    )
    assert f"mv {experiment} {experiment}.records-only && python -m experiments restore" in proc.stderr  # not empty

    (experiment / "pretrain" / "simclr_p1").mkdir()
    (experiment / "pretrain" / "simclr_p1" / "encoder.pt").write_bytes(b"weights")
    proc, log = run_driver(tmp_path, STAND_IN, cmd, JOBS="2")
    assert proc.returncode == 0, proc.stderr
    out = experiment / "probe_test"
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(
        [f"random_s{seed}" for seed in (0, 1, 2)] + ENCODERS
    )
    assert not (tmp_path / "results" / "cpu-protocol_acdc").exists()
    args = json.loads((out / "supervised_encoder_p2" / "probe.json").read_text())
    assert args[args.index("--split_file") + 1] == f"{experiment}/split.json"
    assert args[args.index("--encoder") + 1] == f"{experiment}/pretrain/supervised_encoder_p2/encoder.pt"
    assert args[args.index("--eval") + 1] == "test"
    assert log[-1] == "end gcl_monai.probe.table probe_test.csv"
