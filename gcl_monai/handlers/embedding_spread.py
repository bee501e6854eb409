"""Handler that adds the spread of the image-wise embeddings (the collapse statistics) to every pre-training output."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from monai.engines.utils import IterationEvents
from monai.utils import CommonKeys as Keys

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["EmbeddingSpread"]


class EmbeddingSpread:
    """
    At ``IterationEvents.FORWARD_COMPLETED`` of :py:class:`gcl_monai.engines.GCLPretrainer`, computes from the
    image-wise embeddings of the batch (``engine.state.output[Keys.PRED]["img"]``, the 2B views' projections
    :math:`h_{img}`) two statistics that tell a collapsed representation, and adds them to the iteration's output,
    where :py:class:`CollapseDetector`, the loggers and ``python -m gcl_monai.diagnose`` read them. With
    :math:`z_b` the L2-normalised embeddings (:math:`N = 2B` rows of dimension :math:`D`):

    .. code-block:: text

        "std/img" = (1/D) sum_d std_b(z_bd)                  (~0 when collapsed; 1/sqrt(D) when spread evenly)
        "cos/img" = (|sum_b z_b|^2 - N) / (N (N - 1))         (mean pairwise cosine over b != b'; ~1 when collapsed)

    Both are 0-d tensors on the embeddings' device, detached (no host read in the iteration).
    """

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(IterationEvents.FORWARD_COMPLETED, self)

    def __call__(self, engine: Engine) -> None:
        unit = torch.nn.functional.normalize(engine.state.output[Keys.PRED]["img"].detach(), dim=1)
        num_rows = unit.shape[0]
        engine.state.output["std/img"] = unit.std(0).mean()
        engine.state.output["cos/img"] = (unit.sum(0).square().sum() - num_rows) / (num_rows * (num_rows - 1))
