"""The layout benchmark on a tiny batch: each variant's step runs, the ratios are formed per round, and the
channels-last layout computes what the default layout computes (to float32 rounding), where bfloat16 does not."""

import csv
import json

import torch

from benchmarks.bench_finetune_layout import main, step_function


def test_channels_last_steps_like_the_default_layout(tmp_path):
    nets = {}
    for channels_last in (False, True):
        torch.manual_seed(0)
        nets[channels_last], step = step_function(channels_last, False, 2, 32, str(tmp_path))
        step()
    convs = [p for p in nets[True].parameters() if p.dim() == 4]
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in convs)
    # the same initial weights and batch: the gradients agree to float32 rounding (the weights after Adam's first
    # step need not: it moves each weight by about lr times the sign of its gradient, and the convolution biases
    # before a batch norm have gradients that are rounding noise in either layout)
    for a, b in zip(nets[False].parameters(), nets[True].parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)


def test_the_benchmark_writes_its_ratios(tmp_path):
    out = tmp_path / "layout.json"
    result = main(["--batch-size", "2", "--image-size", "32", "--rounds", "2", "--steps", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    per_round = [r for r in rows if r["round"] != "median"]
    assert [(r["variant"], r["round"]) for r in per_round] == [
        ("channels_last", "0"), ("channels_last", "1"), ("channels_last+bf16", "0"), ("channels_last+bf16", "1")
    ]  # fmt: skip
    assert (
        float(per_round[1]["speedup_over_float32"]) == result["speedup_over_float32"]["channels_last"]["per_round"][1]
    )
    medians = {r["variant"]: float(r["seconds_per_step"]) for r in rows if r["round"] == "median"}
    assert medians == result["seconds_per_step"]
    assert set(result["speedup_over_float32"]) == {"channels_last", "channels_last+bf16"}
    assert all(len(s["per_round"]) == 2 and s["median"] > 0 for s in result["speedup_over_float32"].values())
    error = result["layout_error"]
    assert error["channels_last_vs_float64"] < 1e-5 * max(error["output_sd"], 1.0)
