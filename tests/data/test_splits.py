"""Patient-level splits, labelled subsets and split files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gcl_monai.data import (
    labeled_pool,
    labeled_subset,
    load_split,
    save_split,
    split_patients,
    unlabeled_subset,
)
from gcl_monai.data.acdc import ACDC_GROUPS


def acdc_like(num_per_group: int = 8) -> list[dict]:
    """Two volumes (ED, ES) per patient, patients in blocks of groups like ACDC."""
    datalist = []
    for g, group in enumerate(ACDC_GROUPS):
        for i in range(num_per_group):
            patient = f"patient{g * 20 + i + 1:03d}"
            for state in (0, 1):
                datalist.append(
                    {"image": f"{patient}_{state}.h5#image", "patient": patient, "organ_state": state, "group": group}
                )
    return datalist


def patients(items: list[dict]) -> set[str]:
    return {d["patient"] for d in items}


def test_split_by_patient_with_remainder_to_train():
    datalist = acdc_like()
    split = split_patients(datalist, num_pretrain=20, num_val=5, num_test=10, seed=3)
    assert set(split) == {"pretrain", "train", "val", "test"}
    sizes = {name: len(patients(items)) for name, items in split.items()}
    assert sizes == {"pretrain": 20, "train": 5, "val": 5, "test": 10}
    names = list(split)
    for a in names:
        for b in names:
            assert a == b or not patients(split[a]) & patients(split[b])
    assert sum(len(items) for items in split.values()) == len(datalist)
    for items in split.values():  # both frames of a patient always go together
        assert set(Counter(d["patient"] for d in items).values()) <= {2}


def test_split_stratified_by_group():
    split = split_patients(acdc_like(), num_pretrain=20, num_val=5, num_test=10, seed=0)
    for name, expected in (("pretrain", 4), ("val", 1), ("test", 2), ("train", 1)):
        counts = Counter(d["group"] for d in split[name] if d["organ_state"] == 0)
        assert counts == {g: expected for g in ACDC_GROUPS}, name


def test_split_reproducible_and_order_independent():
    datalist = acdc_like()
    a = split_patients(datalist, 0.5, 0.125, 0.25, seed=1)
    b = split_patients(list(reversed(datalist)), 0.5, 0.125, 0.25, seed=1)
    c = split_patients(datalist, 0.5, 0.125, 0.25, seed=2)
    assert all(patients(a[n]) == patients(b[n]) for n in a)
    assert any(patients(a[n]) != patients(c[n]) for n in a)
    assert len(patients(a["pretrain"])) == 20 and len(patients(a["val"])) == 5


def test_split_without_stratum():
    datalist = [{"image": f"case{i}.nii.gz", "patient": f"Case{i:02d}"} for i in range(31)]
    split = split_patients(datalist, 15, 3, 6, seed=0)
    assert [len(split[n]) for n in ("pretrain", "train", "val", "test")] == [15, 7, 3, 6]
    unstratified = split_patients(acdc_like(), 20, 5, 10, seed=0, stratify_key=None)
    assert len(patients(unstratified["test"])) == 10


def test_split_errors():
    datalist = acdc_like(2)  # 10 patients
    with pytest.raises(ValueError, match="exceed the 10 patients"):
        split_patients(datalist, 6, 3, 2)
    with pytest.raises(ValueError, match="fraction"):
        split_patients(datalist, 1.5, 0, 0)
    with pytest.raises(ValueError, match=">= 0"):
        split_patients(datalist, -1, 0, 0)
    datalist[1]["group"] = "NOR"
    with pytest.raises(ValueError, match="several 'group' values"):
        split_patients(datalist, 2, 2, 2)


def test_labeled_subset_counts_patients():
    train = acdc_like(4)  # 20 patients
    subset = labeled_subset(train, num_labeled=2, draw=0, seed=0)
    assert len(patients(subset)) == 2 and len(subset) == 4  # both frames of each labelled patient
    assert patients(subset) == patients(labeled_subset(list(reversed(train)), 2, 0, 0))  # order-independent


def test_labeled_pool_adds_the_pretraining_patients_on_request():
    split = split_patients(acdc_like(4), num_pretrain=10, num_val=2, num_test=4, seed=0)  # 20 patients, pool of 4
    assert labeled_pool(split) == split["train"]
    both = labeled_pool(split, "train+pretrain")
    assert patients(both) == patients(split["train"]) | patients(split["pretrain"]) and len(patients(both)) == 14
    # 14 distinct L = 1 draws instead of 4, none from the validation or test patients
    singles = {frozenset(patients(labeled_subset(both, 1, d))) for d in range(14)}
    assert len(singles) == 14 and not frozenset().union(*singles) & (patients(split["val"]) | patients(split["test"]))
    with pytest.raises(ValueError, match=r"labeled_pool must be one of \('train', 'train\+pretrain'\), got 'all'"):
        labeled_pool(split, "all")


def test_labeled_subset_draws():
    train = acdc_like(2)  # 10 patients
    draws = [frozenset(patients(labeled_subset(train, 2, d, seed=7))) for d in range(12)]
    assert draws == [frozenset(patients(labeled_subset(train, 2, d, seed=7))) for d in range(12)]
    assert len(set(draws)) == 12  # distinct while possible
    assert frozenset().union(*draws[:5]) == patients(train)  # the first P // L draws are disjoint
    assert draws[0] != frozenset(patients(labeled_subset(train, 2, 0, seed=8)))
    singles = {frozenset(patients(labeled_subset(train, 1, d))) for d in range(10)}
    assert len(singles) == 10
    with pytest.raises(ValueError, match="num_labeled"):
        labeled_subset(train, 11, 0)
    with pytest.raises(ValueError, match="draw"):
        labeled_subset(train, 1, -1)


def test_save_load_split(tmp_path: Path):
    split = split_patients(acdc_like(2), 4, 2, 2, seed=0)
    split["labeled_L1_draw0"] = labeled_subset(split["train"], 1, 0)
    path = save_split(split, tmp_path / "splits" / "acdc.json")
    assert load_split(path) == split
    (tmp_path / "bad.json").write_text(json.dumps({"train": ["not a dict"]}))
    with pytest.raises(ValueError, match="bad.json"):
        load_split(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_split(tmp_path / "missing.json")


def test_a_split_file_appears_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    split = split_patients(acdc_like(2), 4, 2, 2, seed=0)
    path = save_split(split, tmp_path / "split.json")
    before = path.read_text()

    def cut_short(self: Path, text: str, *args, **kwargs) -> int:  # a write that dies half-way (disk full, killed)
        with open(self, "w") as f:
            f.write(text[: len(text) // 2])
        raise OSError("No space left on device")

    monkeypatch.setattr(Path, "write_text", cut_short)
    with pytest.raises(OSError, match="No space left"):
        save_split(split_patients(acdc_like(2), 4, 2, 2, seed=1), path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["split.json"]


def test_unlabeled_subset_and_no_unlabelled_patient_left():
    pool = [{"patient": p, "image": f"{p}_{f}"} for p in ("a", "b", "c") for f in (1, 2)]
    assert [d["image"] for d in unlabeled_subset(pool, pool[:2])] == ["b_1", "b_2", "c_1", "c_2"]
    assert all("label" not in d for d in unlabeled_subset([{**d, "label": "x"} for d in pool], pool[:2]))
    with pytest.raises(ValueError, match="no unlabelled slices left: all 3 training patients are labelled"):
        unlabeled_subset(pool, pool)
