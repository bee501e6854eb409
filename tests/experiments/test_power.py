"""What paired draws resolve: the paired t-test's power, checked by simulation and against reference values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from experiments import results
from experiments.__main__ import main
from experiments.presets import METHODS
from experiments.study.power import detectable_difference, paired_t_power, pairs_needed, spread


def test_power_matches_a_simulation_of_the_paired_t_test():
    rng = np.random.default_rng(0)
    n, sd = 6, 0.05
    delta = detectable_difference(sd, n)
    d = rng.normal(delta, sd, size=(40000, n))
    rejected = np.abs(stats.ttest_1samp(d, 0.0, axis=1).pvalue) < 0.05
    assert rejected.mean() == pytest.approx(0.8, abs=0.01)
    assert paired_t_power(0.0, sd, n) == pytest.approx(0.05)  # no difference: the test's level


def test_detectable_difference_against_reference_values():
    # effect sizes (difference / sd) at 80% power, two-sided 5%, from statsmodels 0.15 TTestPower.solve_power
    for n, effect in (
        (3, 3.264043552819638),
        (6, 1.4345451395119289),
        (24, 0.5971839032778883),
        (100, 0.2829117119690806),
    ):
        assert detectable_difference(1.0, n) == pytest.approx(effect, rel=1e-4)
    # six draws at the spread of GCL - random on ACDC (0.051): about +0.073 (docs/recipe.md)
    assert detectable_difference(0.051, 6) == pytest.approx(0.0732, abs=5e-4)
    assert detectable_difference(0.102, 6) == pytest.approx(2 * detectable_difference(0.051, 6))
    assert math.isnan(detectable_difference(0.051, 1)) and math.isnan(detectable_difference(0.0, 6))
    assert math.isnan(detectable_difference(math.nan, 6))


def test_pairs_needed_is_the_first_n_with_the_stated_power():
    # statsmodels' solve_power: effect 0.3 -> 89.15 pairs, 1.0 -> 9.94 (it returns NaN for effect 10)
    assert pairs_needed(1.0, 0.3) == 90 and pairs_needed(1.0, 1.0) == 10
    for sd, difference in ((0.051, 0.03), (0.044, 0.03), (0.06, 0.03), (0.05, 0.10), (0.01, 0.10), (0.01, 0.2)):
        n = pairs_needed(sd, difference)
        assert paired_t_power(difference, sd, n) >= 0.8
        assert n == 2 or paired_t_power(difference, sd, n - 1) < 0.8
    assert pairs_needed(0.01, 0.10) == 3  # power 0.73 with 2 pairs, 0.99999 with 3
    assert pairs_needed(0.044, 0.03) == 19 and pairs_needed(0.044, -0.03) == 19
    assert pairs_needed(0.0, 0.03) is None and pairs_needed(0.05, 0.0) is None


def test_spread():
    assert spread([0.1, 0.0, 0.2]) == pytest.approx(0.1)
    assert math.isnan(spread([0.1]))


def test_report_states_what_the_pairs_resolve(tmp_path, capsys):
    rows = [
        {
            "dataset": "acdc",
            "pretrain_dataset": "acdc",
            "method": m,
            "num_labeled": 1,
            "repeat": d,
            "draw": d,
            "seed": 0,
            "test_set": "test",
            "dice": v,
            "status": "ok",
            "num_test_volumes": 40,
        }
        for m, values in (("random", (0.4, 0.5, 0.6)), ("simclr", (0.5, 0.5, 0.8)))
        for d, v in enumerate(values)
    ]
    folder = tmp_path / "hand"
    folder.mkdir()
    results.write_csv(rows, folder / "results.csv")
    methods = ("random", "simclr")
    (folder / "plan.json").write_text(
        json.dumps(
            {
                "name": "hand",
                "data": "acdc",
                "pretrain_data": "acdc",
                "methods": list(methods),
                "labels": {m: METHODS[m].label for m in methods},
                "preset": {"name": "cpu-mini", "num_labeled": [1], "repeats": 3, "seeds_per_draw": 1},
                "cuts": [],
                "pretrain": {},
            }
        )
    )
    assert main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--power-differences", "0.05"]) == 0
    lines = (folder / "table.md").read_text().splitlines()
    # differences (0.1, 0.0, 0.2): sd 0.1; three pairs detect detectable_difference(0.1, 3); 0.05 needs 34 pairs
    delta = detectable_difference(0.1, 3)
    assert f"| SimCLR (Base) | sd 0.100: ±{delta:.3f}; ±0.05 needs {pairs_needed(0.1, 0.05)} |" in lines
    assert pairs_needed(0.1, 0.05) == 34
    assert main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--power-differences"]) == 0
    assert "What these pairs resolve" not in (folder / "table.md").read_text()
    with pytest.raises(SystemExit):
        main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--power-differences", "1.5"])
    # a name with no experiment folder: the parser names the folder and the results directory
    with pytest.raises(SystemExit):
        main(["report", "--name", "absent", "--results-dir", str(tmp_path)])
    assert f"{tmp_path / 'absent'} holds no plan.json" in capsys.readouterr().err
