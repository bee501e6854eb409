"""
How many positives of another image a meta label gives an anchor in a batch of Eq. 1.

A batch of B slices drawn uniformly without replacement from the N slices of the pre-training set (the bundles'
shuffled ``DataLoader``) holds, for an anchor whose meta-label value is shared by k slices (the anchor included), a
hypergeometric number of them among its B - 1 other images: mean (B - 1)(k - 1) / (N - 1), none with probability
``scipy.stats.hypergeom(N - 1, k - 1, B - 1).pmf(0)``. Averaged over the anchors. The anchor's own second view is a
positive whatever its label, so an anchor with no other positive contributes what SimCLR's loss would. With few
slices per patient and a small batch, ``patient_id`` is such a label for most anchors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np
from scipy.stats import hypergeom

__all__ = ["batch_positives", "meta_label_positives"]


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


def meta_label_positives(table: Sequence, meta_labels: Sequence[str | None], batch_size: int) -> dict[str, dict]:
    """
    :func:`batch_positives` per meta label of a :py:attr:`gcl_monai.data.SliceDataset.slice_table` (rows with the
    meta labels as attributes; -1 where a slice lacks one); ``None`` (SimCLR) has none. A meta label that some
    slices lack is left out, as is a batch larger than the table.
    """
    out = {}
    if not 2 <= batch_size <= len(table):
        return out
    for name in meta_labels:
        if name is None:
            continue
        labels = [getattr(row, name, -1) for row in table]
        if any(label == -1 for label in labels):
            continue
        out[name] = batch_positives(labels, batch_size)
    return out
