"""Ignite/MONAI engine of GCL pre-training: one forward pass, one gradient per meta label, combined by a handler."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from ignite.engine import Events
from monai.engines import Trainer
from monai.engines.utils import IterationEvents
from monai.utils import CommonKeys as Keys
from torch.optim.optimizer import Optimizer

from gcl_monai.losses import (
    GradFilter,
    LastLayerJacobian,
    MetaContrastiveLoss,
    PixelContrastiveLoss,
    gather_two_view_batch,
)

from .gradient_contract import MISSING_HANDLER, GCLEvents, TaskGradients, require_gradient_combiner, task_gradients

__all__ = ["GCLPretrainer", "SIMCLR_TASK"]

#: task name used in logs for the image-wise loss without meta label (SimCLR).
SIMCLR_TASK = "simclr"


class GCLPretrainer(Trainer):
    """
    Contrastive pre-training with multi-perspective meta labels (Wu et al., ACM MM 2023, Sec. 3.4).

    One iteration (:meth:`_iteration`), in named steps:

        1. :meth:`_views`: the two views of the batch (``view_keys``, or those ``device_views`` draws on the device
           from the batch's slices), concatenated; one forward pass of the network; ``IterationEvents.
           FORWARD_COMPLETED`` with the network's outputs in ``engine.state.output[Keys.PRED]``, where
           :py:class:`gcl_monai.handlers.EmbeddingSpread` adds the collapse statistics ``"std/img"``, ``"cos/img"``.
        2. :meth:`_task_losses`: for each meta label m, :math:`L^m = L^m_{img} + w_{pix} L^m_{pix}` (Eq. 1 and
           5-6; a ``None`` meta label means SimCLR's positives), ``w_pix`` from :meth:`current_pixel_weight`;
           ``IterationEvents.LOSS_COMPLETED``.
        3. :meth:`_apply_task_gradients`: the gradient of every :math:`L^m` with respect to the trainable parameters
           (:py:func:`gcl_monai.engines.gradient_contract.task_gradients` over the shared forward graph) as a
           :py:class:`gcl_monai.engines.TaskGradients` in ``engine.state.gradients``;
           :py:attr:`GCLEvents.GRADIENTS_COMPUTED`, at which a handler applies their combination to ``param.grad``
           (:py:class:`gcl_monai.handlers.GradientCombinerHandler` with GradMitigator, Algorithm 1, or with
           MeanCombiner, the plain mean of Eq. 2).
        4. The optimizer steps; ``IterationEvents.MODEL_COMPLETED``.

    The ablations of the paper's Table 4 are therefore choices of ``meta_labels``, ``pixel_loss``, ``grad_filter``
    and of the attached handlers.

    ``engine.state.output`` holds ``"loss"`` (the mean of :math:`L^m` over the meta labels, whose gradient is the
    update without mitigation), per meta label name ``"img/<name>"`` and ``"pix/<name>"``, ``"pixel_weight"`` (with
    the pixel branch), ``"lr"``, ``"pace"`` (GradFilter's keep fraction, with the pixel branch and a GradFilter),
    what the handlers add (``"std/img"``, ``"cos/img"``) and the statistics applied with the gradients
    (:py:attr:`TaskGradients.stats`, e.g. GradMitigator's cosines and targets).

    Args:
        device: device of the network.
        max_epochs: number of epochs.
        train_data_loader: yields dicts with the two views (``view_keys``; with ``device_views``, the slice under
            ``view_keys[0]``) and the meta labels as (B,) integers.
        network: a :py:class:`gcl_monai.networks.GCLNet` (or a module with the same outputs).
        optimizer: optimizer of the network's parameters.
        meta_labels: one entry per meta label (a key of the batch), ``None`` for SimCLR's positives.
        image_loss: image-wise loss; defaults to ``MetaContrastiveLoss(0.1)``.
        pixel_loss: pixel-wise loss (None disables the pixel branch).
        pixel_weight: weight of the pixel-wise loss (1 in the paper).
        pixel_warmup: number of iterations over which the weight of the pixel-wise loss rises linearly from
            0 to ``pixel_weight`` (iteration t uses ``pixel_weight * min(1, t / pixel_warmup)``), so that the
            image-wise branch can leave its near-collapsed start before the pixel-wise losses pull on the same
            encoder; 0 (the paper) applies the full weight from the first iteration.
        grad_filter: GradFilter used by the pixel loss (its ``keep_fraction`` is set by a pace handler).
        view_keys: keys of the two views in the batch.
        device_views: None (default): the loader delivers the views. Otherwise a callable (e.g.
            :py:class:`gcl_monai.transforms.BatchContrastiveViews`) that makes them on the device: the batch then
            holds one un-augmented slice per item under ``view_keys[0]`` (``pretrain_transforms(views=False)``),
            moved to ``device`` and passed to ``device_views``, which returns one ``(B, C, H, W)`` tensor per view.
        gather_negatives: under ``torch.distributed``, compute the image-wise loss on the batch of all ranks
            (:py:func:`gcl_monai.losses.distributed.gather_two_view_batch`): every rank's images are negatives
            (and, with a meta label, possible positives) of every other rank's, as in SimCLR's distributed
            training, and every rank computes the same loss value; its gradient flows back to each rank's
            embeddings so that the per-meta-label gradients averaged over the ranks by
            :py:class:`gcl_monai.handlers.GradientCombinerHandler` equal the single-process gradients on the
            concatenated batch. The pixel-wise loss stays per rank (its positives and negatives are pixels of the
            rank's own images). Defaults to False: each rank's loss is the single-GPU loss of its own batch, so the
            objective (number of negatives, meta-label positives, hence the tuned temperature and batch size)
            does not change with the number of ranks, and no collective runs in the forward and backward passes;
            the update is then the average of per-rank mini-batch gradients. No effect in a single process.
        batched_backward: compute the per-meta-label gradients in one batched backward pass instead of one pass per
            meta label (:py:func:`gcl_monai.engines.gradient_contract.task_gradients`; equal values, the faster one
            depends on the device, see ``benchmarks/bench_pretrain_iteration.py``). Defaults to False.
        epoch_length, non_blocking, iteration_update, train_handlers, event_names, event_to_attr, to_kwargs:
            as in :py:class:`monai.engines.SupervisedTrainer`.

    Raises:
        ValueError: when ``meta_labels`` is empty, ``pixel_warmup`` is negative, or a batch lacks a meta label
            (named in the message).
        RuntimeError: when the run starts without a handler of :py:attr:`GCLEvents.GRADIENTS_COMPUTED` (attach a
            :py:class:`gcl_monai.handlers.GradientCombinerHandler`), a loss is not finite, or no handler applied the
            gradients (:py:mod:`gcl_monai.engines.gradient_contract`).
    """

    def __init__(
        self,
        device: torch.device | str,
        max_epochs: int,
        train_data_loader: Iterable,
        network: torch.nn.Module,
        optimizer: Optimizer,
        meta_labels: Sequence[str | None] = (None,),
        image_loss: Callable | None = None,
        pixel_loss: PixelContrastiveLoss | None = None,
        pixel_weight: float = 1.0,
        pixel_warmup: int = 0,
        grad_filter: GradFilter | None = None,
        view_keys: Sequence[str] = ("image", "image_2"),
        device_views: Callable[[torch.Tensor], Sequence[torch.Tensor]] | None = None,
        gather_negatives: bool = False,
        batched_backward: bool = False,
        epoch_length: int | None = None,
        non_blocking: bool = False,
        iteration_update: Callable | None = None,
        train_handlers: Sequence | None = None,
        event_names: list | None = None,
        event_to_attr: dict | None = None,
        to_kwargs: dict | None = None,
    ) -> None:
        if len(meta_labels) == 0:
            raise ValueError("meta_labels must name at least one meta label (or contain None for SimCLR).")
        self.network = network
        self.optimizer = optimizer
        self.meta_labels = list(meta_labels)
        self.image_loss = image_loss if image_loss is not None else MetaContrastiveLoss(temperature=0.1)
        self.pixel_loss = pixel_loss
        if pixel_warmup < 0:
            raise ValueError(f"pixel_warmup must be >= 0, got {pixel_warmup}.")
        self.pixel_weight = pixel_weight
        self.pixel_warmup = pixel_warmup
        self.grad_filter = grad_filter
        self.view_keys = tuple(view_keys)
        self.device_views = device_views
        self.gather_negatives = gather_negatives
        self.batched_backward = batched_backward
        super().__init__(
            device=device,
            max_epochs=max_epochs,
            data_loader=train_data_loader,
            epoch_length=epoch_length,
            non_blocking=non_blocking,
            iteration_update=iteration_update,
            handlers=train_handlers,
            event_names=[GCLEvents, IterationEvents, *(event_names or [])],
            event_to_attr=event_to_attr,
            decollate=False,
            to_kwargs=to_kwargs,
        )
        # a run without a combining handler stops when it starts, before the first iteration (gradient_contract)
        self.add_event_handler(Events.STARTED, require_gradient_combiner)

    @property
    def task_names(self) -> list[str]:
        """Names of the meta labels in logs (``"simclr"`` for None)."""
        return [SIMCLR_TASK if m is None else str(m) for m in self.meta_labels]

    def views(self, batchdata: dict) -> torch.Tensor:
        """The two views of the batch concatenated, ``(2B, C, H, W)`` on the engine's device (drawn there by
        ``device_views`` when it is set)."""
        to_device = {"non_blocking": self.non_blocking, **self.to_kwargs}
        if self.device_views is None:
            return torch.cat([torch.as_tensor(batchdata[k]) for k in self.view_keys]).to(self.state.device, **to_device)
        slices = torch.as_tensor(batchdata[self.view_keys[0]]).to(self.state.device, **to_device)
        return torch.cat(tuple(self.device_views(slices)))

    def _labels(self, batchdata: dict) -> list[torch.Tensor | None]:
        """One ``(B,)`` label tensor per meta label (None for SimCLR's positives).

        Raises:
            ValueError: when the batch lacks a meta label.
        """
        labels = []
        for m in self.meta_labels:
            if m is None:
                labels.append(None)
                continue
            if m not in batchdata:
                raise ValueError(f"meta label '{m}' is not in the batch; available keys: {sorted(batchdata)}.")
            labels.append(torch.as_tensor(batchdata[m]).to(self.state.device).long().view(-1))
        return labels

    def current_pixel_weight(self) -> float:
        """The weight of the pixel-wise losses at this iteration: ``pixel_weight * min(1, t / pixel_warmup)``."""
        if self.pixel_warmup == 0:
            return self.pixel_weight
        return self.pixel_weight * min(1.0, self.state.iteration / self.pixel_warmup)

    def _task_losses(self, out: dict, labels: list[torch.Tensor | None], output: dict) -> list[torch.Tensor]:
        """
        :math:`L^m = L^m_{img} + w_{pix} L^m_{pix}` for every meta label m (Eq. 1 and 5-6), their terms logged in
        ``output``.

        Raises:
            RuntimeError: when a loss is not finite (the meta labels are named).
        """
        # the closed-form Jacobian is only needed while GradFilter drops positives (pace below 1)
        filtering = self.pixel_loss is not None and self.grad_filter is not None and self.grad_filter.keep_fraction < 1
        jacobian = LastLayerJacobian.from_output(self.network, out) if filtering else None
        img, img_labels = out["img"], labels
        if self.gather_negatives:
            img, img_labels = gather_two_view_batch(img, labels)
        pixel_losses = [None] * len(labels)
        pixel_weight = self.current_pixel_weight()
        if self.pixel_loss is not None:  # one pass over the (anchor, positive) image pairs of all meta labels
            output["pixel_weight"] = pixel_weight
            pixel_losses = self.pixel_loss.forward_multi(out["pix"], out["img_map"], labels, self.grad_filter, jacobian)
        task_losses = []
        for name, y_img, pix in zip(self.task_names, img_labels, pixel_losses):
            loss = self.image_loss(img, y_img)
            output[f"img/{name}"] = loss.detach()
            if pix is not None:
                output[f"pix/{name}"] = pix.detach()
                loss = loss + pixel_weight * pix
            task_losses.append(loss)
        finite = torch.isfinite(torch.stack(task_losses))
        if not bool(finite.all()):  # one host read per iteration, whatever the number of labels
            bad = [n for n, ok in zip(self.task_names, finite.tolist()) if not ok]
            raise RuntimeError(
                f"non-finite loss for meta label(s) {bad} at iteration {self.state.iteration}: "
                f"{output}; lower the learning rate or check the inputs."
            )
        return task_losses

    def _apply_task_gradients(self, task_losses: list[torch.Tensor]) -> TaskGradients:
        """
        Computes every meta label's gradient, hands them to the handler of :py:attr:`GCLEvents.GRADIENTS_COMPUTED`
        as ``engine.state.gradients`` and returns them once applied to ``param.grad``.

        Raises:
            RuntimeError: when no handler applied the gradients.
        """
        params = [p for p in self.network.parameters() if p.requires_grad]
        grads = task_gradients(task_losses, params, batched=self.batched_backward)
        self.state.gradients = TaskGradients(names=self.task_names, params=params, grads=grads)
        self.fire_event(IterationEvents.BACKWARD_COMPLETED)
        self.fire_event(GCLEvents.GRADIENTS_COMPUTED)
        if not self.state.gradients.applied:
            raise RuntimeError(f"no handler applied the per-meta-label gradients: {MISSING_HANDLER}.")
        return self.state.gradients

    def _iteration(self, engine: GCLPretrainer, batchdata: dict) -> dict:
        """One GCL step: forward pass of both views, the loss of every meta label, their gradients combined by the
        handler of :py:attr:`GCLEvents.GRADIENTS_COMPUTED`, optimizer step."""
        if batchdata is None:
            raise ValueError("Must provide batch data for current iteration.")
        views, labels = engine.views(batchdata), engine._labels(batchdata)
        engine.network.train()
        engine.optimizer.zero_grad(set_to_none=True)
        engine.state.output = {Keys.PRED: engine.network(views)}
        engine.fire_event(IterationEvents.FORWARD_COMPLETED)  # e.g. gcl_monai.handlers.EmbeddingSpread
        output = engine.state.output
        out = output.pop(Keys.PRED)
        task_losses = engine._task_losses(out, labels, output)
        output[Keys.LOSS] = torch.stack(task_losses).mean().detach()
        engine.fire_event(IterationEvents.LOSS_COMPLETED)
        gradients = engine._apply_task_gradients(task_losses)
        engine.optimizer.step()
        engine.fire_event(IterationEvents.MODEL_COMPLETED)
        output.update(gradients.stats)
        output["lr"] = engine.optimizer.param_groups[0]["lr"]
        if engine.pixel_loss is not None and engine.grad_filter is not None:
            output["pace"] = engine.grad_filter.keep_fraction
        return output
