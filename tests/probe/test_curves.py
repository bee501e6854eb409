"""Probe curves of several runs with a method mean, and the protocol's length rule."""

import json


def test_curves_of_several_runs_with_a_method_mean(tmp_path):
    from gcl_monai.probe.curves import main, method_of

    for name, values in {"gcl": [0.40, 0.50], "gcl_p1": [0.42, 0.46], "simclr": [0.38, 0.39]}.items():
        run = tmp_path / name
        run.mkdir()
        lines = [json.dumps({"epoch": 4 * (i + 1), "dice": v}) for i, v in enumerate(values)]
        lines.append(json.dumps({"epoch": 8, "dice": values[1]}))  # a resumed run repeats an epoch: its last line
        (run / "probe_history.jsonl").write_text("\n".join(lines) + "\n")
    reference = tmp_path / "random.json"
    reference.write_text(json.dumps({"dice": 0.36}))
    out = tmp_path / "curves"
    assert (
        main(
            [str(tmp_path / n) for n in ("gcl", "gcl_p1", "simclr")]
            + ["--output_dir", str(out), "--reference", f"random={reference}"]
        )
        == 0
    )
    md = (out / "curves.md").read_text()
    assert "| **gcl, mean** | 0.410 (n=2) | 0.480 (n=2) |" in md and "| random (reference) | 0.360 | 0.360 |" in md
    assert method_of("simclr_p12") == "simclr" and (out / "curves.csv").read_text().count("\n") == 7
    assert "- gcl: epoch 8 (seeds: 2)" in md and "- simclr: epoch 8 (seeds: 1)" in md


def test_the_protocols_length_rule():
    from gcl_monai.probe.curves import chosen_length

    # means over the two seeds: epoch 4 0.45, epoch 8 0.47, epoch 12 0.47 (a tie: the shorter), epoch 16 seed 0 only
    seed0 = {4: 0.44, 8: 0.48, 12: 0.46, 16: 0.60}
    seed1 = {4: 0.46, 8: 0.46, 12: 0.48}
    assert chosen_length([seed0, seed1]) == 8
    assert chosen_length([seed0]) == 16
    assert chosen_length([{4: 0.5}, {8: 0.5}]) is None and chosen_length([]) is None
