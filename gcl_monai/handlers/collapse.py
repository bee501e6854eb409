"""Handler that detects a collapsed contrastive representation and stops the run loudly."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import ignite.distributed as idist
from ignite.engine import Events

from gcl_monai.losses import chance_level

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["CollapseDetector", "RepresentationCollapse"]

logger = logging.getLogger("gcl_monai.handlers")


class RepresentationCollapse(RuntimeError):
    """Raised when the image-wise representations have collapsed."""


class CollapseDetector:
    """
    Watches the pre-training outputs of :py:class:`gcl_monai.engines.GCLPretrainer` after every iteration. The
    representations are collapsed when, for ``patience`` consecutive iterations, the mean per-dimension standard
    deviation of the normalised image-wise representations (``"std/img"``, added by :py:class:`EmbeddingSpread`) is
    below ``min_std`` or every image-wise loss is within ``loss_tol`` of :math:`\\ln(2B - 1)`, the value reached
    when all 2B embeddings of a batch are identical. A collapsed encoder must never be fine-tuned from: the detector
    raises :py:class:`RepresentationCollapse` (``action="raise"``) or logs an error and terminates the run
    (``action="terminate"``); either way ``engine.state.collapsed`` is set to True.

    Under ``torch.distributed`` every rank decides the same: an iteration counts as collapsed when it does on all
    ranks (one all-reduce of a flag per iteration, through ``ignite.distributed``), so all ranks stop at the same
    iteration instead of one raising while the others wait in the next collective. With the trainer's
    ``gather_negatives``, the image-wise losses are computed over the batch of all ranks, and :math:`B` is the
    global batch.

    Args:
        patience: consecutive collapsed iterations before acting.
        min_std: threshold of ``"std/img"`` (a healthy 128-D unit embedding has about 1 / sqrt(128) = 0.088).
        loss_tol: tolerance around ln(2B - 1).
        action: ``"raise"`` or ``"terminate"``.

    Raises:
        ValueError: for an unknown ``action``.
        KeyError: at an iteration whose output has no ``"std/img"`` (no :py:class:`EmbeddingSpread` attached).
    """

    def __init__(self, patience: int = 20, min_std: float = 1e-3, loss_tol: float = 1e-3, action: str = "raise"):
        if action not in ("raise", "terminate"):
            raise ValueError(f"action must be 'raise' or 'terminate', got {action!r}.")
        self.patience = patience
        self.min_std = min_std
        self.loss_tol = loss_tol
        self.action = action
        self._count = 0

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.ITERATION_COMPLETED, self)
        engine.state.collapsed = False

    def __call__(self, engine: Engine) -> None:
        out = engine.state.output
        if "std/img" not in out:
            raise KeyError(
                "CollapseDetector reads 'std/img' from the pre-training output: attach a "
                "gcl_monai.handlers.EmbeddingSpread to the trainer."
            )
        batch = len(engine.state.batch["image"])
        if getattr(engine, "gather_negatives", False):
            batch *= idist.get_world_size()
        chance = chance_level(batch)
        img_losses = [float(v) for k, v in out.items() if k.startswith("img/")]
        stuck = bool(img_losses) and all(abs(v - chance) < self.loss_tol for v in img_losses)
        collapsed = idist.all_reduce(float(stuck or float(out["std/img"]) < self.min_std), op="MIN") > 0.5
        self._count = self._count + 1 if collapsed else 0
        if self._count < self.patience:
            return
        engine.state.collapsed = True
        msg = (
            f"representation collapse at iteration {engine.state.iteration}: std/img = {float(out['std/img']):.2e}, "
            f"image-wise losses {img_losses} vs ln(2B-1) = {chance:.4f} for {self.patience} iterations. "
            "Lower the learning rate, add warm-up or change the temperature; do not fine-tune from this encoder."
        )
        logger.error(msg)
        if self.action == "raise":
            raise RepresentationCollapse(msg)
        engine.terminate()
