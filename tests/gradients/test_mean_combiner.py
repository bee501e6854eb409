"""MeanCombiner: the plain mean of the per-meta-label gradients, its state, the scale of GradMitigator."""

from __future__ import annotations

import warnings

import pytest
import torch

from gcl_monai.gradients import GradMitigator, MeanCombiner
from tests.gradients.gradient_helpers import SHAPES, _random_grads


def test_mean_combiner_returns_mean():
    gen = torch.Generator().manual_seed(9)
    grads = _random_grads(3, SHAPES, gen)
    combiner = MeanCombiner(3)
    out = combiner.combine(grads)
    for p, o in enumerate(out):
        assert o.shape == SHAPES[p]
        assert torch.allclose(o, (grads[0][p] + grads[1][p] + grads[2][p]) / 3, atol=1e-6)
    assert combiner.summary() == {}
    state = combiner.state_dict()
    MeanCombiner(3).load_state_dict(state)
    with pytest.raises(ValueError, match="num_tasks=3"):
        MeanCombiner(2).load_state_dict(state)
    # same scale as GradMitigator: identical when no pair conflicts (targets 0, positive cosines)
    aligned = [[torch.tensor([1.0, 0.2])], [torch.tensor([1.0, 0.4])]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.allclose(GradMitigator(2).combine(aligned)[0], MeanCombiner(2).combine(aligned)[0])
