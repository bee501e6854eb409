"""The order in which a pre-training ``DataLoader`` reads the slices: groups of slices that share a meta label."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterator, Sequence

import torch
from torch.utils.data import Sampler

__all__ = ["GroupedSampler"]


class GroupedSampler(Sampler[int]):
    """
    The dataset's indices in groups of ``group_size`` slices that share a meta-label value (``patient_id`` in the
    bundles), the groups in random order. A ``DataLoader`` whose ``batch_size`` is a multiple of ``group_size`` then
    reads batches of ``batch_size / group_size`` whole groups, so every anchor has at least ``group_size - 1`` other
    images of its patient among the positives of Eq. 1. With uniform batches of 16 on ACDC, two anchors in three
    have none (``gcl_monai.diagnose.positives``; docs/recipe.md).

    This departs from the paper, which does not say how batches are drawn. It is the bundles' ``slices_per_patient``
    (1, the default, keeps the loader's uniform shuffling).

    In each pass, the slices of each value are shuffled and cut into groups of ``group_size``. A value's last,
    incomplete group is left out of that pass, and so is a value with fewer slices. Then the groups are shuffled.
    The permutations come from torch's default generator when the pass starts. ``monai.utils.set_determinism``
    seeds it, and :class:`gcl_monai.handlers.EpochSeedHandler` does so at every epoch, so a resumed run reads the
    same order, as with ``shuffle=True``. With ``num_replicas`` > 1 (several processes), every process draws the
    same order and takes every ``num_replicas``-th group from ``rank`` on, the same number of groups each.

    Args:
        labels: one meta-label value per index of the dataset.
        group_size: slices per group (>= 1).
        batch_size: the loader's batch size, checked to be a multiple of ``group_size`` (None: not checked).
        num_replicas: processes that share the passes (1: one process).
        rank: this process's rank in ``0 .. num_replicas - 1``.

    Raises:
        ValueError: ``group_size`` < 1, a ``batch_size`` that is not a multiple of it, a ``rank`` outside
            ``0 .. num_replicas - 1``, or no value with ``group_size`` slices.
    """

    def __init__(
        self,
        labels: Sequence[Hashable],
        group_size: int = 2,
        batch_size: int | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}.")
        if batch_size is not None and batch_size % group_size:
            raise ValueError(
                f"the batch size ({batch_size}) must be a multiple of the slices per group ({group_size}), so that "
                "every batch holds whole groups."
            )
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in 0 .. {num_replicas - 1}, got {rank}.")
        members: dict[Hashable, list[int]] = defaultdict(list)
        for index, label in enumerate(labels):
            members[label].append(index)
        self.members = [torch.tensor(m) for m in members.values() if len(m) >= group_size]
        if not self.members:
            raise ValueError(f"no meta-label value has {group_size} slices: no group can be formed.")
        self.group_size, self.num_replicas, self.rank = group_size, num_replicas, rank
        self.num_groups = sum(len(m) // group_size for m in self.members) // num_replicas

    def __iter__(self) -> Iterator[int]:
        k = self.group_size
        groups = []
        for member in self.members:
            shuffled = member[torch.randperm(len(member))]
            groups.extend(shuffled[: len(shuffled) // k * k].view(-1, k))
        order = torch.randperm(len(groups))[self.rank :: self.num_replicas][: self.num_groups]
        for g in order.tolist():
            yield from groups[g].tolist()

    def __len__(self) -> int:
        return self.num_groups * self.group_size
