"""MeanCombiner: the plain average of the per-meta-label gradients (the "no mitigation" ablation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gcl_monai.gradients.combiner import GradientCombiner

__all__ = ["MeanCombiner"]


class MeanCombiner(GradientCombiner):
    """
    Combine the gradients of ``M`` meta-label losses by their plain average ``g = (1/M) sum_m g_m``, the gradient
    of the average loss of Eq. (2) of the paper. It is the "no mitigation" ablation of :class:`GradMitigator`
    (same interface and same scale of the output) and has no state. Values are passed through as they are:
    a non-finite entry propagates to the output, as it would in ``loss.mean().backward()``.

    The average is computed under ``torch.no_grad()`` in float32 at least; every output tensor has the shape and
    dtype of the corresponding gradient of task 0.

    Reference:
        Wu et al., "GCL: Gradient-Guided Contrastive Learning for Medical Image Segmentation with
        Multi-Perspective Meta Labels", ACM MM 2023. https://doi.org/10.1145/3581783.3612113

    Args:
        num_tasks: number of meta labels ``M`` whose gradients are combined, at least 1.

    Raises:
        ValueError: When ``num_tasks < 1``.
    """

    def combine(self, grads: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
        """
        Args:
            grads: ``num_tasks`` lists (one per meta label) of per-parameter gradients, same shapes across tasks.

        Returns:
            ``(1/M) sum_m g_m``, one tensor per parameter with the shape and dtype of ``grads[0][p]``.

        Raises:
            ValueError: When ``grads`` does not hold ``num_tasks`` lists of tensors with matching shapes.
            TypeError: When a gradient is not a floating point tensor.
        """
        layout = self._layout_for(grads, per_parameter=True)
        with torch.no_grad():
            g = layout.pack(grads)
            out = torch.mul(g[0], 1.0 / self.num_tasks)
            for m in range(1, self.num_tasks):
                out.add_(g[m], alpha=1.0 / self.num_tasks)
        return layout.unpack(out, grads[0])

    def summary(self, as_tensors: bool = False) -> dict[str, float]:
        """Returns an empty dictionary (nothing to log)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Returns ``{"num_tasks": M}`` (checked on loading; there is no other state)."""
        return {"num_tasks": self.num_tasks}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """
        Args:
            state_dict: a dictionary returned by :meth:`state_dict`.

        Raises:
            KeyError: When ``state_dict`` has no ``"num_tasks"`` entry.
            ValueError: When ``state_dict["num_tasks"]`` differs from this instance.
        """
        self._check_num_tasks(state_dict)
