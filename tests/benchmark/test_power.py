"""What paired draws resolve: the paired t-test's power, checked against the noncentral t distribution."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from gcl_monai.benchmark import results
from gcl_monai.benchmark.__main__ import main
from gcl_monai.benchmark.power import detectable_difference, pairs_needed, spread
from gcl_monai.benchmark.presets import METHODS


def _power(difference, sd, n, alpha=0.05):
    """Two-sided paired t-test power from the noncentral t distribution (df n - 1, noncentrality d sqrt(n) / sd)."""
    t = stats.t.ppf(1 - alpha / 2, n - 1)
    nc = difference * math.sqrt(n) / sd
    return stats.nct.sf(t, n - 1, nc) + stats.nct.cdf(-t, n - 1, nc)


def test_detectable_difference_has_the_stated_power():
    # six draws at the spread of GCL - random on ACDC (0.051): about +0.073 (docs/recipe.md)
    delta = detectable_difference(0.051, 6)
    assert delta == pytest.approx(0.0732, abs=5e-4)
    assert _power(delta, 0.051, 6) == pytest.approx(0.8, abs=1e-4)
    assert detectable_difference(0.102, 6) == pytest.approx(2 * delta)  # linear in the spread
    assert detectable_difference(0.051, 12) < delta
    assert math.isnan(detectable_difference(0.051, 1)) and math.isnan(detectable_difference(0.0, 6))
    assert math.isnan(detectable_difference(math.nan, 6))


def test_pairs_needed_is_the_first_n_with_the_stated_power():
    for sd, difference in ((0.051, 0.03), (0.044, 0.03), (0.06, 0.03), (0.05, 0.10)):
        n = pairs_needed(sd, difference)
        assert _power(difference, sd, n) >= 0.8 > _power(difference, sd, n - 1)
    assert pairs_needed(0.044, 0.03) == 19 and pairs_needed(0.044, -0.03) == 19
    assert pairs_needed(0.0, 0.03) is None and pairs_needed(0.05, 0.0) is None


def test_spread():
    assert spread([0.1, 0.0, 0.2]) == pytest.approx(0.1)
    assert math.isnan(spread([0.1]))


def test_report_states_what_the_pairs_resolve(tmp_path):
    rows = [{"dataset": "acdc", "pretrain_dataset": "acdc", "method": m, "num_labeled": 1, "repeat": d, "draw": d,
             "seed": 0, "test_set": "test", "dice": v, "status": "ok", "num_test_volumes": 40}
            for m, values in (("random", (0.4, 0.5, 0.6)), ("simclr", (0.5, 0.5, 0.8))) for d, v in enumerate(values)]
    folder = tmp_path / "hand"
    folder.mkdir()
    results.write_csv(rows, folder / "results.csv")
    methods = ("random", "simclr")
    (folder / "plan.json").write_text(json.dumps({
        "name": "hand", "data": "acdc", "pretrain_data": "acdc", "methods": list(methods),
        "labels": {m: METHODS[m].label for m in methods},
        "preset": {"name": "cpu-mini", "num_labeled": [1], "repeats": 3, "seeds_per_draw": 1}, "cuts": [],
        "pretrain": {}}))
    assert main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--power-differences", "0.05"]) == 0
    lines = (folder / "table.md").read_text().splitlines()
    # differences (0.1, 0.0, 0.2): sd 0.1; three pairs detect detectable_difference(0.1, 3); 0.05 needs 34 pairs
    delta = detectable_difference(0.1, 3)
    assert _power(delta, 0.1, 3) == pytest.approx(0.8, abs=1e-4)
    assert f"| SimCLR (Base) | sd 0.100: ±{delta:.3f}; ±0.05 needs {pairs_needed(0.1, 0.05)} |" in lines
    assert pairs_needed(0.1, 0.05) == 34
    assert main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--power-differences"]) == 0
    assert "What these pairs resolve" not in (folder / "table.md").read_text()
    with pytest.raises(SystemExit):
        main(["report", "--name", "hand", "--results-dir", str(tmp_path), "--power-differences", "1.5"])
