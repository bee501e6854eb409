"""The CSV of probes (gcl_monai.probe.table): a row per probe.json as written."""

import json

import pytest


def test_the_probe_table_holds_a_row_per_probe_as_written(probed, tmp_path):
    """The CSV of gcl_monai.probe.table: the figures of each probe.json, the folds of a cross-validation only."""
    import csv

    from gcl_monai.probe.table import main

    root = probed[0]
    out = tmp_path / "probe.csv"
    assert main([str(out), str(root / "random_a"), str(root / "test" / "probe.json")]) == 0
    rows = list(csv.DictReader(out.open()))
    written = [json.loads((root / name / "probe.json").read_text()) for name in ("random_a", "test")]
    assert [r["run"] for r in rows] == ["random_a", "test"] and [r["mode"] for r in rows] == [
        "cross-validation",
        "test",
    ]
    for row, probe in zip(rows, written):
        assert float(row["dice"]) == pytest.approx(probe["dice"], abs=0)
        assert float(row["lv"]) == pytest.approx(probe["dice_per_class"]["lv"], abs=0)
        assert int(row["num_volumes"]) == probe["num_volumes"]
    assert rows[0]["encoder"] == "random" and rows[0]["encoder_seed"] == "0"
    assert [float(d) for d in rows[0]["fold_dice"].split(";")] == pytest.approx(
        [f["dice"] for f in written[0]["folds"]], abs=5e-5
    )
    assert rows[1]["fold_dice"] == "" and rows[1]["encoder_seed"] == ""
    with pytest.raises(FileNotFoundError, match="nowhere/probe.json does not exist"):
        main([str(out), str(tmp_path / "nowhere")])
