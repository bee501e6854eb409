"""The comparison table of diagnosed runs (gcl_monai.diagnose.compare). Named test_diagnose_compare.py:
tests/experiments holds a test_compare.py, and pytest needs unique basenames."""

import pytest

from gcl_monai.diagnose import summarise, write_diagnosis
from tests.diagnose.diagnose_helpers import _rows


def test_compare_runs(tmp_path):
    from gcl_monai.diagnose.compare import comparison_table

    ref_rows = [{**r, "img/a": 3.5 - 0.1 * i} for i, r in enumerate(_rows())]
    write_diagnosis(tmp_path / "ref", ref_rows, summarise(ref_rows, ["a"], window_fraction=0.2))
    write_diagnosis(tmp_path / "run", _rows(), summarise(_rows(), ["a", "b"], window_fraction=0.2))
    table = comparison_table([tmp_path / "ref", tmp_path / "run"], reference=tmp_path / "ref").splitlines()
    assert len(table) == 4 and table[2].startswith("| ref | 10 |") and table[3].startswith("| run | 10 |")
    assert "| 0.800 | 1.00x |" in table[2] and "| 0.200 | 0.25x |" in table[3]  # mean drops 0.8 and (0.4 + 0) / 2
    assert table[3].endswith("| stalled at chance: b |") and "b: " in table[3] and "a: 3.475 -> 3.075 ✓" in table[3]
    with pytest.raises(FileNotFoundError, match="missing"):
        comparison_table([tmp_path / "missing"])
