"""Common base of the multi-task gradient combiners: input validation and gradient packing."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["GradientCombiner", "GradientLayout"]

#: number of elements per block of the packed layout (see :class:`GradientLayout`).
BLOCK_SIZE = 256


class GradientLayout:
    """
    Packs a list of per-parameter gradients into a ``(num_blocks, BLOCK_SIZE)`` buffer and back.

    Every parameter is flattened and zero-padded to a multiple of ``BLOCK_SIZE`` elements, so that each
    block belongs to exactly one parameter. Per-parameter reductions (dot products, squared norms) are then
    a contiguous per-block reduction followed by a segment sum over the small ``block_ids`` vector, and
    per-parameter scalars are broadcast back to the elements through ``scalar[block_ids].unsqueeze(-1)``,
    without any Python loop over the parameters. The zero padding contributes nothing to any of these.

    Args:
        shapes: shape of every parameter tensor.
        device: device of the packed buffer and of ``block_ids``.
        dtype: floating point dtype of the packed buffer.
        per_parameter: if ``True`` every parameter is its own segment (``num_segments == len(shapes)``),
            otherwise all parameters form one segment (``num_segments == 1``).

    Attributes:
        param_ids: ``(num_blocks,)`` index of the parameter of every block.
        block_ids: ``(num_blocks,)`` index of the segment of every block (``param_ids`` or zeros).
    """

    def __init__(
        self, shapes: Sequence[torch.Size], device: torch.device, dtype: torch.dtype, per_parameter: bool
    ) -> None:
        self.key = (tuple(shapes), device, dtype, per_parameter)
        self.dtype = dtype
        self.shapes = tuple(shapes)
        self.numels = [math.prod(s) for s in self.shapes]
        self.padded = [-(-n // BLOCK_SIZE) * BLOCK_SIZE for n in self.numels]
        self.num_blocks = sum(self.padded) // BLOCK_SIZE
        self.num_segments = len(self.shapes) if per_parameter else 1
        blocks_per_param = torch.tensor([p // BLOCK_SIZE for p in self.padded], device=device)
        self.param_ids = torch.repeat_interleave(
            torch.arange(len(self.shapes), device=device), blocks_per_param, output_size=self.num_blocks
        )
        self.block_ids = self.param_ids if per_parameter else torch.zeros_like(self.param_ids)
        zeros = torch.zeros(BLOCK_SIZE, device=device, dtype=dtype)
        self._pads = [zeros[: p - n] for n, p in zip(self.numels, self.padded)]
        self._buffer: torch.Tensor | None = None

    def pack(self, grads: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
        """
        Args:
            grads: one list of per-parameter gradients per task, with the shapes of this layout.

        Returns:
            a ``(num_tasks, num_blocks, BLOCK_SIZE)`` tensor of dtype ``self.dtype`` holding a copy of ``grads``.
            It is a buffer kept by the layout and overwritten by the next call (reusing it avoids allocating
            and page-faulting ``num_tasks`` gradient-sized buffers at every step).
        """
        size = (len(grads), self.num_blocks * BLOCK_SIZE)
        if self._buffer is None or self._buffer.shape != size:
            self._buffer = torch.empty(size, device=self.block_ids.device, dtype=self.dtype)
        for task, row in zip(grads, self._buffer):
            torch.cat([x for g, pad in zip(task, self._pads) for x in (g.reshape(-1), pad)], out=row)
        return self._buffer.view(len(grads), self.num_blocks, BLOCK_SIZE)

    def unpack(self, packed: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """
        Args:
            packed: a ``(num_blocks, BLOCK_SIZE)`` tensor.
            like: tensors giving the dtype of every output tensor.

        Returns:
            one tensor per parameter with the shapes of this layout (views of ``packed`` where no dtype
            conversion is needed).
        """
        chunks = packed.reshape(-1).split(self.padded)
        return [c[:n].view(s).to(ref.dtype) for c, n, s, ref in zip(chunks, self.numels, self.shapes, like)]

    def segment_sum(self, block_values: torch.Tensor, per_parameter: bool = False) -> torch.Tensor:
        """
        Args:
            block_values: a ``(..., num_blocks)`` tensor of per-block values.
            per_parameter: sum over the blocks of every parameter instead of every segment.

        Returns:
            the ``(..., num_segments)`` (or ``(..., len(shapes))``) tensor of the sums over the blocks.
        """
        ids = self.param_ids if per_parameter else self.block_ids
        out = block_values.new_zeros(*block_values.shape[:-1], len(self.shapes) if per_parameter else self.num_segments)
        return out.index_add_(-1, ids, block_values)


class GradientCombiner(ABC):
    """
    Base class of the combiners that merge the gradients of ``num_tasks`` losses (one per meta label)
    into the single gradient used to update the shared parameters.

    Args:
        num_tasks: number of tasks ``M`` (meta labels), at least 1.

    Raises:
        ValueError: When ``num_tasks`` is smaller than 1.
    """

    def __init__(self, num_tasks: int) -> None:
        if int(num_tasks) < 1:
            raise ValueError(f"num_tasks must be at least 1, got {num_tasks}.")
        self.num_tasks = int(num_tasks)
        self._layout: GradientLayout | None = None

    def _layout_for(self, grads: Sequence[Sequence[torch.Tensor]], per_parameter: bool) -> GradientLayout:
        """
        Validate ``grads`` and return the (cached) packing layout of its shapes.

        Raises:
            ValueError: When ``grads`` does not hold ``num_tasks`` non-empty lists of tensors with the same shapes.
            TypeError: When an element is not a floating point tensor.
        """
        if len(grads) != self.num_tasks:
            raise ValueError(f"expected gradients of {self.num_tasks} task(s), got {len(grads)}.")
        if len(grads[0]) == 0:
            raise ValueError("the gradient list of task 0 is empty.")
        dtype = torch.float32
        for m, task in enumerate(grads):
            if len(task) != len(grads[0]):
                raise ValueError(f"task {m} has {len(task)} gradient tensor(s), task 0 has {len(grads[0])}.")
            for p, (g, ref) in enumerate(zip(task, grads[0])):
                if not isinstance(g, torch.Tensor) or not g.is_floating_point():
                    raise TypeError(f"gradient of task {m}, parameter {p} must be a floating point tensor, got {g!r}.")
                if g.shape != ref.shape:
                    raise ValueError(
                        f"gradient of task {m}, parameter {p} has shape {tuple(g.shape)}, "
                        f"task 0 has {tuple(ref.shape)}."
                    )
                dtype = torch.promote_types(dtype, g.dtype)
        key = (tuple(g.shape for g in grads[0]), grads[0][0].device, dtype, per_parameter)
        if self._layout is None or self._layout.key != key:
            self._layout = GradientLayout(key[0], key[1], dtype, per_parameter)
        return self._layout

    @abstractmethod
    def combine(self, grads: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
        """
        Args:
            grads: ``num_tasks`` lists (one per task) of per-parameter gradients, same shapes across tasks.

        Returns:
            the combined gradient, one tensor per parameter.
        """

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Returns the state needed to resume the combiner."""

    @abstractmethod
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a state returned by :meth:`state_dict`."""

    @abstractmethod
    def summary(self, as_tensors: bool = False) -> dict[str, float] | dict[str, torch.Tensor]:
        """
        Returns scalars describing the last call of :meth:`combine`, for logging: floats, or with ``as_tensors``
        0-d tensors left on the gradients' device (reading them is then up to the logger).
        """

    def _check_num_tasks(self, state_dict: dict[str, Any]) -> None:
        """
        Raises:
            KeyError: When ``state_dict`` has no ``"num_tasks"`` entry.
            ValueError: When ``state_dict["num_tasks"]`` differs from ``self.num_tasks``.
        """
        if "num_tasks" not in state_dict:
            raise KeyError(f"{type(self).__name__} state_dict has no 'num_tasks' entry.")
        if int(state_dict["num_tasks"]) != self.num_tasks:
            raise ValueError(
                f"{type(self).__name__} state_dict was saved with num_tasks={state_dict['num_tasks']}, "
                f"this instance has num_tasks={self.num_tasks}."
            )
