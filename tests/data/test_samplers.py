"""GroupedSampler: groups of slices of one patient, whole groups per batch, torch's seed, ranks."""

import pytest
import torch

from gcl_monai.data import GroupedSampler

# 3 patients: 5, 4 and 1 slices
LABELS = ["a"] * 5 + ["b"] * 4 + ["c"]


def _groups(order, k):
    return [order[i : i + k] for i in range(0, len(order), k)]


def test_every_group_is_one_patient_and_the_leftovers_wait_for_another_pass():
    torch.manual_seed(0)
    order = list(GroupedSampler(LABELS, group_size=2))
    # a: 2 groups (one slice left over), b: 2 groups, c: too few slices
    assert len(order) == len(GroupedSampler(LABELS, group_size=2)) == 8 and len(set(order)) == 8
    assert all(len({LABELS[i] for i in g}) == 1 for g in _groups(order, 2))
    assert sorted(LABELS[i] for i in order) == ["a"] * 4 + ["b"] * 4


def test_a_loader_reads_whole_groups_and_the_seed_fixes_the_order():
    sampler = GroupedSampler(LABELS, group_size=2, batch_size=4)
    loader = torch.utils.data.DataLoader(list(range(len(LABELS))), batch_size=4, sampler=sampler)
    torch.manual_seed(1)
    batches = [b.tolist() for b in loader]
    assert [len(b) for b in batches] == [4, 4]
    assert all(LABELS[b[0]] == LABELS[b[1]] and LABELS[b[2]] == LABELS[b[3]] for b in batches)
    torch.manual_seed(1)
    assert [b.tolist() for b in loader] == batches  # what EpochSeedHandler's set_determinism gives on resume
    orders = set()
    for seed in range(6):
        torch.manual_seed(seed)
        orders.add(tuple(sampler))
    assert len(orders) > 1


def test_replicas_share_one_order_and_take_disjoint_groups():
    labels = [p for p in range(6) for _ in range(4)]  # 6 patients x 4 slices: 12 groups of 2
    torch.manual_seed(3)
    full = _groups(list(GroupedSampler(labels, 2)), 2)
    parts = []
    for rank in range(2):
        torch.manual_seed(3)
        parts.append(_groups(list(GroupedSampler(labels, 2, num_replicas=2, rank=rank)), 2))
    assert parts[0] == full[0::2] and parts[1] == full[1::2] and len(parts[0]) == len(parts[1]) == 6


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="batch size \\(5\\)"):
        GroupedSampler(LABELS, group_size=2, batch_size=5)
    with pytest.raises(ValueError, match="group_size"):
        GroupedSampler(LABELS, group_size=0)
    with pytest.raises(ValueError, match="rank"):
        GroupedSampler(LABELS, group_size=2, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="no meta-label value has 6 slices"):
        GroupedSampler(LABELS, group_size=6)
