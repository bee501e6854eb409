"""The stage-A rules from the command line: the length rule and a variant above the default's mean."""

import json


def test_the_stage_a_rules_from_the_command_line(tmp_path, capsys):
    """The drivers' calls: the length rule prints the epoch; a variant above the default's mean exits 0, below 1,
    without a probe at the epoch 2 (not a verdict)."""
    from gcl_monai.probe.rules import above_mean, main

    def run(name: str, history: dict[int, float]) -> str:
        folder = tmp_path / name
        folder.mkdir()
        lines = [json.dumps({"epoch": e, "dice": d}) for e, d in history.items()]
        (folder / "probe_history.jsonl").write_text("\n".join(lines) + "\n")
        return str(folder)

    gcl = run("gcl", {4: 0.44, 8: 0.48, 12: 0.46})
    gcl_p1 = run("gcl_p1", {4: 0.46, 8: 0.46, 12: 0.48})
    assert main(["length", gcl, gcl_p1]) == 0 and capsys.readouterr().out.strip() == "8"
    assert main(["length", gcl, run("other", {16: 0.5})]) == 1
    above, below = run("v_above", {8: 0.471}), run("v_below", {8: 0.47})  # the default's mean at 8: 0.47
    assert main(["above", above, "--than", gcl, gcl_p1, "--epoch", "8"]) == 0
    assert main(["above", below, "--than", gcl, gcl_p1, "--epoch", "8"]) == 1
    assert main(["above", above, "--than", gcl, gcl_p1, "--epoch", "12"]) == 2
    assert "no probe evaluation at epoch 12" in capsys.readouterr().err
    assert above_mean({8: 0.5}, [{8: 0.4}, {8: 0.6}], 8) is False
