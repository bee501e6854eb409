"""Ignite/MONAI engine of GCL pre-training: one forward pass, one gradient per meta label, combined by a handler."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from monai.engines import Trainer
from monai.engines.utils import IterationEvents
from monai.utils import CommonKeys as Keys
from torch.optim.optimizer import Optimizer

from gcl_monai.gradients.backward import task_gradients
from gcl_monai.losses import (
    GradFilter,
    LastLayerJacobian,
    MetaContrastiveLoss,
    PixelContrastiveLoss,
    gather_two_view_batch,
)

from .events import GCLEvents

__all__ = ["GCLPretrainer", "SIMCLR_TASK"]

#: task name used in logs for the image-wise loss without meta label (SimCLR).
SIMCLR_TASK = "simclr"


class GCLPretrainer(Trainer):
    """
    Contrastive pre-training with multi-perspective meta labels (Wu et al., ACM MM 2023, Sec. 3.4).

    Each iteration concatenates the two views of the batch (``view_keys``, or those ``device_views`` makes on the
    device from the batch's slices), runs the network once, and computes for each meta label m the loss
    :math:`L^m = L^m_{img} + w_{pix} L^m_{pix}` (Eq. 1 and 5; a ``None`` meta label means "no meta label", i.e.
    SimCLR's positives). It then computes the gradient of every :math:`L^m`
    with respect to the trainable parameters (one ``torch.autograd.grad`` per meta label over the shared forward
    graph), stores them in ``engine.state.task_grads`` and fires :py:attr:`GCLEvents.GRADIENTS_COMPUTED`, at
    which a combiner handler (GradMitigator, Algorithm 1, or MeanCombiner, the plain mean of Eq. 2) writes
    ``param.grad``; then the optimizer steps. The ablations of the paper's Table 4 are therefore choices of
    ``meta_labels``, ``pixel_loss``, ``grad_filter`` and of the attached handlers.

    ``engine.state.output`` holds ``"loss"`` (the mean of :math:`L^m` over the meta labels, whose gradient is the
    update without mitigation), per meta label name ``"img/<name>"`` and
    ``"pix/<name>"``, ``"std/img"`` (the mean per-dimension standard deviation of the normalised image-wise
    representations, near 0 when they collapse), ``"cos/img"`` (their mean pairwise cosine similarity, near 1
    when they collapse), ``"pixel_weight"`` (with the pixel branch), ``"lr"``, ``"pace"`` (GradFilter's keep
    fraction, with the pixel branch and a GradFilter), plus whatever the combiner handler reports in
    ``engine.state.gradient_stats``.

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
            :py:class:`gcl_monai.handlers.GradMitigatorHandler` equal the single-process gradients on the
            concatenated batch. The pixel-wise loss stays per rank (its positives and negatives are pixels of the
            rank's own images). Defaults to False: each rank's loss is the single-GPU loss of its own batch, so the
            objective (number of negatives, meta-label positives, hence the tuned temperature and batch size)
            does not change with the number of ranks, and no collective runs in the forward and backward passes;
            the update is then the average of per-rank mini-batch gradients. No effect in a single process.
        batched_backward: compute the per-meta-label gradients in one batched backward pass instead of one pass per
            meta label (:py:func:`gcl_monai.gradients.task_gradients`; equal values, the faster one depends on the
            device, see ``benchmarks/bench_pretrain_iteration.py``). Defaults to False.
        epoch_length, non_blocking, iteration_update, train_handlers, event_names, event_to_attr, to_kwargs:
            as in :py:class:`monai.engines.SupervisedTrainer`.

    Raises:
        ValueError: when ``meta_labels`` is empty, ``pixel_warmup`` is negative, or a batch lacks a meta label
            (named in the message).
        RuntimeError: when a loss is not finite, or no combiner handler consumed the gradients.
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

    @property
    def task_names(self) -> list[str]:
        """Names of the meta labels in logs (``"simclr"`` for None)."""
        return [SIMCLR_TASK if m is None else str(m) for m in self.meta_labels]

    def _labels(self, batchdata: dict) -> list[torch.Tensor | None]:
        labels = []
        for m in self.meta_labels:
            if m is None:
                labels.append(None)
                continue
            if m not in batchdata:
                raise ValueError(f"meta label '{m}' is not in the batch; available keys: {sorted(batchdata)}.")
            labels.append(torch.as_tensor(batchdata[m]).to(self.state.device).long().view(-1))
        return labels

    def _iteration(self, engine: GCLPretrainer, batchdata: dict) -> dict:
        if batchdata is None:
            raise ValueError("Must provide batch data for current iteration.")
        if engine.device_views is None:
            views = torch.cat([torch.as_tensor(batchdata[k]) for k in engine.view_keys]).to(
                engine.state.device, non_blocking=engine.non_blocking, **engine.to_kwargs
            )
        else:  # one un-augmented slice per item: the views are drawn for the whole batch on the device
            slices = torch.as_tensor(batchdata[engine.view_keys[0]]).to(
                engine.state.device, non_blocking=engine.non_blocking, **engine.to_kwargs
            )
            views = torch.cat(tuple(engine.device_views(slices)))
        labels = engine._labels(batchdata)
        engine.network.train()
        engine.optimizer.zero_grad(set_to_none=True)
        out = engine.network(views)
        engine.fire_event(IterationEvents.FORWARD_COMPLETED)

        # the closed-form Jacobian is only needed while GradFilter drops positives (pace below 1)
        filtering = (
            engine.pixel_loss is not None and engine.grad_filter is not None and engine.grad_filter.keep_fraction < 1
        )
        jacobian = LastLayerJacobian.from_output(engine.network, out) if filtering else None
        # per-dimension std of the normalised image-wise representations; ~0 means collapse
        unit = torch.nn.functional.normalize(out["img"].detach(), dim=1)
        num_rows = unit.shape[0]
        mean_cos = (unit.sum(0).square().sum() - num_rows) / (num_rows * (num_rows - 1))
        output: dict = {"std/img": unit.std(0).mean(), "cos/img": mean_cos}
        img, img_labels = out["img"], labels
        if engine.gather_negatives:
            img, img_labels = gather_two_view_batch(img, labels)
        pixel_losses = [None] * len(labels)
        pixel_weight = engine.pixel_weight
        if engine.pixel_warmup > 0:
            pixel_weight *= min(1.0, engine.state.iteration / engine.pixel_warmup)
        if engine.pixel_loss is not None:  # one pass over the (anchor, positive) image pairs of all meta labels
            output["pixel_weight"] = pixel_weight
            pixel_losses = engine.pixel_loss.forward_multi(
                out["pix"], out["img_map"], labels, engine.grad_filter, jacobian
            )
        task_losses = []
        for name, y_img, pix in zip(engine.task_names, img_labels, pixel_losses):
            loss = engine.image_loss(img, y_img)
            output[f"img/{name}"] = loss.detach()
            if pix is not None:
                output[f"pix/{name}"] = pix.detach()
                loss = loss + pixel_weight * pix
            task_losses.append(loss)
        stacked = torch.stack(task_losses)
        if not bool(torch.isfinite(stacked).all()):  # one host read per iteration, whatever the number of labels
            bad = [n for n, finite in zip(engine.task_names, torch.isfinite(stacked).tolist()) if not finite]
            raise RuntimeError(
                f"non-finite loss for meta label(s) {bad} at iteration {engine.state.iteration}: "
                f"{output}; lower the learning rate or check the inputs."
            )
        output[Keys.LOSS] = stacked.mean().detach()
        engine.fire_event(IterationEvents.LOSS_COMPLETED)

        params = [p for p in engine.network.parameters() if p.requires_grad]
        engine.state.task_params = params
        engine.state.task_grads = task_gradients(task_losses, params, batched=engine.batched_backward)
        engine.fire_event(IterationEvents.BACKWARD_COMPLETED)
        engine.fire_event(GCLEvents.GRADIENTS_COMPUTED)
        if engine.state.task_grads is not None:
            raise RuntimeError(
                "no gradient combiner consumed the per-meta-label gradients: attach a "
                "gcl_monai.handlers.GradMitigatorHandler (with a GradMitigator or a MeanCombiner)."
            )
        engine.optimizer.step()
        engine.fire_event(IterationEvents.MODEL_COMPLETED)
        output.update(getattr(engine.state, "gradient_stats", {}) or {})
        output["lr"] = engine.optimizer.param_groups[0]["lr"]
        if engine.pixel_loss is not None and engine.grad_filter is not None:
            output["pace"] = engine.grad_filter.keep_fraction
        return output
