"""Positives per anchor for each meta label: by hand, and counted in the samplers' batches."""

import pytest
import torch


def test_positives_counted_in_the_samplers_batches():
    """Uniform batches (a shuffled order): the count approaches the hypergeometric figures; batches of two slices of
    one patient (GroupedSampler): every anchor has its group mate, 1 + what the other group brings; torch's random
    state is as before."""
    from gcl_monai.data import GroupedSampler
    from gcl_monai.data.slice_dataset import SliceRecord
    from gcl_monai.diagnose.positives import batch_positives, sampled_positives

    patients = [0, 0, 1, 1, 1, 1, 2, 2]
    table = [SliceRecord(v, 0, p, v % 4, 0) for v, p in enumerate(patients)]

    class Shuffled:
        def __iter__(self):
            return iter(torch.randperm(len(table)).tolist())

    torch.manual_seed(0)
    state = torch.random.get_rng_state()
    uniform = sampled_positives(table, ["patient_id", "organ_state"], 4, Shuffled(), passes=3000)
    assert torch.equal(torch.random.get_rng_state(), state)
    for name, labels in (("patient_id", patients), ("organ_state", [0] * 8)):
        expected = batch_positives(labels, 4)
        assert uniform[name]["mean"] == pytest.approx(expected["mean"], abs=0.02)
        assert uniform[name]["share"] == pytest.approx(expected["share"], abs=0.02)
    grouped = sampled_positives(table, ["patient_id"], 4, GroupedSampler(patients, group_size=2), passes=500)
    # the other group of the batch is patient 1's with probability 1/3 (3 groups besides, one of them patient 1's)
    # for an anchor of patient 1, else 0: mean 1 + 2 * (4/8) * (1/3)
    assert grouped["patient_id"]["share"] == 1.0
    assert grouped["patient_id"]["mean"] == pytest.approx(1 + 2 * 0.5 / 3, abs=0.03)
    assert sampled_positives(table, ["patient_id"], 16, Shuffled()) == {}


def test_positives_per_anchor_by_hand():
    """Labels a a b b b c, batches of 3 (2 other images out of 5): group a finds its other one with probability
    1 - C(4,2)/C(5,2) = 0.4 (mean 2 * 1/5), group b 1 - C(3,2)/C(5,2) = 0.7 (mean 2 * 2/5), c never; averaged over
    the 6 anchors."""
    from gcl_monai.data.slice_dataset import SliceRecord
    from gcl_monai.diagnose.positives import batch_positives, meta_label_positives

    got = batch_positives(list("aabbbc"), 3)
    assert got["mean"] == pytest.approx((2 * 0.4 + 3 * 0.8) / 6)
    assert got["share"] == pytest.approx((2 * 0.4 + 3 * 0.7) / 6)
    with pytest.raises(ValueError, match="batch 7"):
        batch_positives(list("aabbbc"), 7)
    table = [SliceRecord(v, s, p, q, -1) for v, (s, p, q) in enumerate([(0, 0, 0), (1, 0, 1), (0, 1, 0), (1, 1, 1)])]
    positives = meta_label_positives(table, [None, "patient_id", "slice_quantile", "organ_state"], 2)
    # SimCLR (None) has no meta label, organ_state is absent (-1); one other image out of 3, each label pairs two
    assert set(positives) == {"patient_id", "slice_quantile"}
    assert positives["patient_id"] == pytest.approx({"mean": 1 / 3, "share": 1 / 3})
