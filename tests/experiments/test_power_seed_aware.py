"""The power simulation of the seed-aware interval: no effect rejects about alpha of the time, a large one always."""

import csv

from benchmarks.power_seed_aware import main, simulate


def test_power_is_alpha_without_an_effect_and_one_with_a_large_effect():
    null = simulate(seeds=3, draws=6, effect=0.0, seed_sd=0.0, draw_sd=0.03, residual_sd=0.03, experiments=400)
    assert 0.005 <= null["power"] <= 0.06  # alpha 0.025
    assert null["coverage"] >= 0.9
    large = simulate(seeds=3, draws=6, effect=0.5, seed_sd=0.0, draw_sd=0.03, residual_sd=0.03, experiments=50)
    assert large["power"] == 1.0


def test_a_seed_effect_widens_the_interval():
    quiet = simulate(seeds=2, draws=6, effect=0.08, seed_sd=0.0, draw_sd=0.03, residual_sd=0.03, experiments=200)
    noisy = simulate(seeds=2, draws=6, effect=0.08, seed_sd=0.05, draw_sd=0.03, residual_sd=0.03, experiments=200)
    assert noisy["median_width"] > 1.5 * quiet["median_width"] and noisy["power"] < quiet["power"]


def test_the_command_writes_one_row_per_design_and_scenario(tmp_path):
    out = tmp_path / "power.csv"
    argv = ["--seeds", "2", "3", "--draws", "6", "--effect", "0.08", "--seed-sd", "0", "0.02", "--draw-sd", "0.03"]
    assert main([*argv, "--residual-sd", "0.03", "--experiments", "20", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["seeds"], r["seed_sd"]) for r in rows] == [("2", "0.0"), ("2", "0.02"), ("3", "0.0"), ("3", "0.02")]
