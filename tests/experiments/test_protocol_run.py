"""benchmarks/protocol_run.sh, the protocol's driver: the commands it runs in order and stage B's rule, with a
stand-in for ``python -m experiments`` that logs each call and writes stage B's validation analysis."""

import sys

import pytest

from tests.experiments.drivers import run_driver

# the stand-in: the driver's rule (`control-resolved`) runs in the real Python; a `protocol --test-set val` call
# writes the control's row of the validation analysis with the interval's lower bound that CONTROL_LOW gives for its L
STAND_IN = f"""#!{sys.executable}
import os, subprocess, sys
args = sys.argv[1:]
if args[:1] == ["-"] or args[2:3] == ["control-resolved"]:
    sys.exit(subprocess.run([{sys.executable!r}, *args]).returncode)
with open(os.environ["CALLS"], "a") as log:
    log.write(" ".join(args[2:]) + "\\n")
if "--test-set" in args and args[args.index("--test-set") + 1] == "val":
    name = args[args.index("--name") + 1]
    l = name.split("-L")[1].split("_")[0]
    low = dict(item.split("=") for item in os.environ["CONTROL_LOW"].split(","))[l]
    folder = os.path.join(args[args.index("--results-dir") + 1], name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "protocol_analysis_val.csv"), "w") as f:
        f.write("method,baseline,num_labeled,low,missing\\nsupervised_encoder,random,%s,%s,\\n" % (l, low))
"""


def _drive(tmp_path, control_low: str, recipe: str | None = "default", **env_vars: str) -> tuple[list[str], str]:
    if recipe is not None:
        env_vars["RECIPE"] = recipe
    cmd = ["bash", "docs/results/protocol_prostate/run.sh", "DATA", str(tmp_path / "results")]
    proc, calls = run_driver(tmp_path, STAND_IN, cmd, CONTROL_LOW=control_low, **env_vars)
    assert proc.returncode == 0, proc.stderr
    results = str(tmp_path / "results")
    return [" ".join(a.replace(f"{results}/", "") for a in c.split() if a != results) for c in calls], proc.stdout


BASE = "--preset cpu-protocol-prostate --data prostate --data-root DATA --results-dir --jobs 2"
CONTROL = "--methods random supervised_encoder --pretrain-seeds 0 1"
STAGE_B2 = [
    f"{BASE} {CONTROL} --num-labeled 2 --name protocol-stageB-L2_prostate",
    "protocol --results-dir --name protocol-stageB-L2_prostate --test-set val --registration protocol",
]


def test_a_resolved_control_at_l2_runs_stage_c_there_then_keeps_and_analyses_it(tmp_path):
    calls, _ = _drive(tmp_path, "2=0.01,1=0.05", recipe="--pretrain-set epochs=36")
    recipe = "--pretrain-set epochs=36"
    assert calls == STAGE_B2 + [
        f"{BASE} --num-labeled 2 --name protocol-stageC-L2_prostate {recipe}"
        " --pretrain-from protocol-stageB-L2_prostate --finetune-from protocol-stageB-L2_prostate",
        "protocol --results-dir --name protocol-stageC-L2_prostate --registration protocol",
        "keep protocol-stageC-L2_prostate cpu-protocol_prostate",
        "protocol --results-dir --name cpu-protocol_prostate --registration protocol",
    ]


@pytest.mark.parametrize(
    "variable, flag", [("REMAKE_ENCODERS", "--remake-encoders"), ("SET_ASIDE_STALE", "--set-aside-stale-cells")]
)
def test_the_machine_switches_reach_every_run_of_the_driver(tmp_path, variable, flag):
    calls, _ = _drive(tmp_path, "2=0.01,1=0.05", **{variable: "1"})
    runs = [c for c in calls if c.startswith("--preset")]
    assert len(runs) == 2 and all(c.endswith(flag) or f"{flag} " in c for c in runs)
    (tmp_path / "unset").mkdir()
    unset, _ = _drive(tmp_path / "unset", "2=0.01,1=0.05")
    assert not any(flag in c for c in unset)


def test_patients_never_seen_are_evaluated_in_every_run_and_analysed_beside_the_test_split(tmp_path):
    calls, _ = _drive(tmp_path, "2=0.01,1=0.05", TEST_ROOT="UNSEEN")
    runs = [c for c in calls if c.startswith("--preset")]
    assert len(runs) == 2 and all(" --test-root UNSEEN " in c for c in runs)
    analysis = "protocol --results-dir --name {} --registration protocol"
    assert calls[3:] == [
        analysis.format("protocol-stageC-L2_prostate"),
        analysis.format("protocol-stageC-L2_prostate") + " --test-set external",
        "keep protocol-stageC-L2_prostate cpu-protocol_prostate",
        analysis.format("cpu-protocol_prostate"),
        analysis.format("cpu-protocol_prostate") + " --test-set external",
    ]


def test_an_unresolved_control_at_l2_moves_to_l1_and_l1_becomes_primary(tmp_path):
    calls, _ = _drive(tmp_path, "2=-0.01,1=0.02")
    assert calls[:2] == STAGE_B2
    assert calls[2].endswith(
        "--num-labeled 1 --name protocol-stageB-L1_prostate --pretrain-from protocol-stageB-L2_prostate"
    )
    assert calls[3].endswith("--name protocol-stageB-L1_prostate --test-set val --registration protocol-L1")
    assert calls[4].endswith(
        "--num-labeled 1 --name protocol-stageC-L1_prostate --pretrain-from protocol-stageB-L2_prostate"
        " --finetune-from protocol-stageB-L1_prostate"
    )
    assert (
        calls[-1] == "protocol --results-dir --name cpu-protocol_prostate --registration protocol-L1"
        and len(calls) == 8
    )


@pytest.mark.parametrize(
    "control_low, recipe, said, runs",
    [
        ("2=-0.01,1=-0.02", "default", "the control is resolved at neither L; the protocol stops here", 4),
        ("2=0.01,1=0.05", None, "Stage B done (primary L = 2). Stage C needs RECIPE", 2),
    ],
)
def test_the_driver_stops_where_the_protocol_says(tmp_path, control_low, recipe, said, runs):
    calls, out = _drive(tmp_path, control_low, recipe)
    assert said in out and len(calls) == runs
