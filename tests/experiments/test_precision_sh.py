"""A round's precision (benchmarks/precision.sh): the recipe's name says bfloat16, and a round without a chosen
precision does not start (issue 53: round 9 chooses it before the later rounds run)."""

import subprocess
from pathlib import Path

import pytest

PRECISION = Path(__file__).resolve().parents[2] / "benchmarks" / "precision.sh"


def _amp_recipe(amp: str | None) -> subprocess.CompletedProcess:
    setting = "unset AMP" if amp is None else f"AMP='{amp}'"
    script = f'{setting}; source "{PRECISION}"; set -e; RECIPE="$(amp_recipe batch20)"; echo "run $RECIPE"'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


@pytest.mark.parametrize("amp, recipe", [("True", "batch20_bf16"), ("False", "batch20")])
def test_the_recipe_is_named_in_its_precision(amp, recipe):
    done = _amp_recipe(amp)
    assert (done.returncode, done.stdout) == (0, f"run {recipe}\n")


@pytest.mark.parametrize("amp", [None, "", "true", "yes"])
def test_a_round_without_a_chosen_precision_stops_naming_it(amp):
    done = _amp_recipe(amp)
    assert done.returncode == 2 and done.stdout == ""
    assert "AMP must be True or False" in done.stderr and f"got '{amp or ''}'" in done.stderr
