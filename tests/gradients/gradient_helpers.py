"""Random per-task gradients of a few parameter shapes, shared by the tests of the gradient combiners."""

from __future__ import annotations

import torch

SHAPES = [(4, 3, 3), (4,), (2, 4, 2), (5,), (3, 1)]


def _random_grads(num_tasks: int, shapes, generator: torch.Generator, dtype=torch.float32):
    return [[torch.randn(s, generator=generator, dtype=dtype) for s in shapes] for _ in range(num_tasks)]
