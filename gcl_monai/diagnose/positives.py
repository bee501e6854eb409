"""
How many positives of another image a meta label gives an anchor in a batch of Eq. 1.

A batch of B slices drawn uniformly without replacement from the N slices of the pre-training set (the bundles'
shuffled ``DataLoader``) holds, for an anchor whose meta-label value is shared by k slices (the anchor included), a
hypergeometric number of them among its B - 1 other images: mean (B - 1)(k - 1) / (N - 1), none with probability
``scipy.stats.hypergeom(N - 1, k - 1, B - 1).pmf(0)``. Averaged over the anchors. The anchor's own second view is a
positive whatever its label, so an anchor with no other positive contributes what SimCLR's loss would. With few
slices per patient and a small batch, ``patient_id`` is such a label for most anchors.

Batches of whole groups (the bundles' ``slices_per_patient`` k > 1, :class:`gcl_monai.data.GroupedSampler`) have no
such closed form for every label: :func:`sampled_positives` counts them in batches cut from the sampler's own order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
import torch
from scipy.stats import hypergeom

__all__ = ["batch_positives", "meta_label_positives", "sampled_positives"]


def batch_positives(labels: Sequence[Hashable], batch_size: int) -> dict[str, float]:
    """
    For batches of ``batch_size`` drawn without replacement from images with these ``labels`` (one per image):
    ``mean``, the expected number of other images with the anchor's label, and ``share``, the probability that there
    is at least one, both averaged over the anchors.

    Raises:
        ValueError: fewer than two images, or a batch size outside 2 .. the number of images.
    """
    n = len(labels)
    if n < 2 or not 2 <= batch_size <= n:
        raise ValueError(f"need 2 <= batch_size <= number of images (>= 2); got batch {batch_size}, {n} images.")
    sizes = np.array([count for count in Counter(labels).values()])
    weights = sizes / n  # the share of anchors in each label group
    others = sizes - 1
    mean = (batch_size - 1) * others / (n - 1)
    share = 1.0 - hypergeom(n - 1, others, batch_size - 1).pmf(0)
    return {"mean": float(weights @ mean), "share": float(weights @ share)}


def _label_columns(table: Sequence, meta_labels: Sequence[str | None]) -> dict[str, list]:
    """Each meta label's value per slice of the table; SimCLR's ``None`` and a label some slices lack (-1) left out."""
    columns = {name: [getattr(row, name, -1) for row in table] for name in meta_labels if name is not None}
    return {name: labels for name, labels in columns.items() if all(label != -1 for label in labels)}


def meta_label_positives(table: Sequence, meta_labels: Sequence[str | None], batch_size: int) -> dict[str, dict]:
    """
    :func:`batch_positives` per meta label of a :py:attr:`gcl_monai.data.SliceDataset.slice_table` (rows with the
    meta labels as attributes; -1 where a slice lacks one); ``None`` (SimCLR) has none. A meta label that some
    slices lack is left out, as is a batch larger than the table.
    """
    if not 2 <= batch_size <= len(table):
        return {}
    return {name: batch_positives(labels, batch_size) for name, labels in _label_columns(table, meta_labels).items()}


def sampled_positives(
    table: Sequence, meta_labels: Sequence[str | None], batch_size: int, sampler: Iterable[int], passes: int = 20
) -> dict[str, dict]:
    """
    :func:`meta_label_positives`' figures counted instead of computed: ``passes`` passes of ``sampler`` (indices of
    ``table``) cut into batches of ``batch_size`` as a ``DataLoader`` does (an incomplete last batch left out), and
    for each anchor of each batch the other images with its label. Torch's random state is restored afterwards, so
    the training that follows reads the order it would have read.

    Returns:
        per meta label ``mean`` (other images with the anchor's label) and ``share`` (anchors with at least one),
        over every anchor of every batch; {} when no pass yields a whole batch.
    """
    columns = {name: np.asarray(labels) for name, labels in _label_columns(table, meta_labels).items()}
    counts: dict[str, list[np.ndarray]] = {name: [] for name in columns}
    with torch.random.fork_rng(devices=[]):
        for _ in range(passes):
            order = np.fromiter(iter(sampler), dtype=np.int64)
            for start in range(0, len(order) - batch_size + 1, batch_size):
                batch = order[start : start + batch_size]
                for name, labels in columns.items():
                    values = labels[batch]
                    counts[name].append((values[:, None] == values[None, :]).sum(axis=1) - 1)
    if not any(counts.values()):
        return {}
    return {
        name: {"mean": float(np.concatenate(c).mean()), "share": float((np.concatenate(c) > 0).mean())}
        for name, c in counts.items()
    }
