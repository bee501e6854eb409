"""The literal Algorithm 1 of the paper (the reference GradMitigator is checked against) on the case worked by hand."""

from __future__ import annotations

import math

import torch

from gcl_monai.gradients.algorithm1 import algorithm1


def test_the_literal_algorithm_1_on_the_hand_computed_case():
    """The reference itself on the 2D case worked by hand in test_hand_computed_2d_case."""
    targets = torch.zeros(2, 2, 1, dtype=torch.float64)
    (out,) = algorithm1(
        [[torch.tensor([1.0, 0.0], dtype=torch.float64)], [torch.tensor([-1.0, 1.0]).double()]], targets, 0.5
    )
    expected = torch.tensor([0.25 - 1 / (4 * math.sqrt(7)), 0.75 - 1 / (4 * math.sqrt(7))], dtype=torch.float64)
    assert torch.allclose(out, expected, atol=1e-12)
    assert torch.allclose(targets[0, 1], torch.tensor(-1 / (2 * math.sqrt(2)), dtype=torch.float64))
