"""Handlers for pre-training on several processes (torch.distributed) and resuming on another number of them."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import ignite.distributed as idist
import torch
import torch.distributed as dist
from ignite.engine import Events
from torch.optim.lr_scheduler import CosineAnnealingLR

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["BroadcastParameters", "EpochLengthAdapter"]


class BroadcastParameters:
    """
    At ``Events.STARTED``, copies the parameters and buffers of ``network`` on rank ``src`` to all other ranks,
    so that every rank starts from the same weights. GCL pre-training does not wrap its network in
    ``DistributedDataParallel`` (which would broadcast at construction): :py:class:`gcl_monai.engines.GCLPretrainer`
    computes one gradient per meta label with ``torch.autograd.grad``, which DDP's reducer does not see, and
    :py:class:`gcl_monai.handlers.GradientCombinerHandler` averages those gradients across ranks instead. With the
    same averaged gradients and the same optimizer on every rank, the weights then stay equal.

    Attach it after a ``CheckpointLoader`` (ignite calls the handlers of an event in the order they were
    attached), so that a loaded checkpoint is broadcast too. Buffers are broadcast once here; afterwards
    batch-norm running statistics follow each rank's own batches (rank ``src``'s are saved), unless the
    network's batch norms are converted with ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``. Does nothing
    when ``torch.distributed`` is not initialised or has a single rank.

    Args:
        network: the pre-training network, on the device of this rank.
        src: rank whose values are copied.

    Raises:
        TypeError: when ``network`` is a ``DistributedDataParallel`` module.
    """

    def __init__(self, network: torch.nn.Module, src: int = 0) -> None:
        if isinstance(network, torch.nn.parallel.DistributedDataParallel):
            raise TypeError(
                "GCL pre-training must not wrap its network in DistributedDataParallel: the per-meta-label gradients "
                "(torch.autograd.grad) bypass DDP's reducer; GradientCombinerHandler averages them across ranks."
            )
        self.network = network
        self.src = src

    def attach(self, engine: Engine) -> None:
        engine.add_event_handler(Events.STARTED, self)

    def __call__(self, engine: Engine | None = None) -> None:
        if idist.get_world_size() == 1:
            return
        for tensor in itertools.chain(self.network.parameters(), self.network.buffers()):
            dist.broadcast(tensor.detach(), src=self.src)


class EpochLengthAdapter:
    """
    Lets a run resume from an epoch-end checkpoint written with another number of iterations per epoch: by a
    run on another number of ranks (a ``DistributedSampler`` gives each rank ``1 / world_size`` of the data) or
    with another batch size. ignite restores the checkpoint's ``epoch_length`` with the trainer, so without this
    handler the resumed epochs would keep the old length (covering only part of the data, or cycling through
    it). At ``Events.STARTED`` (attach it after the ``CheckpointLoader``), when the restored epoch length
    differs from the engine's when this handler was attached, the state is re-expressed in the current length
    (``iteration = epoch * epoch_length``), and ``lr_scheduler``, an iteration-level ``CosineAnnealingLR``
    restored from the same checkpoint, gets its ``last_epoch`` and ``T_max`` scaled by the same factor, so the
    learning rate continues from the same fraction of its schedule. Iteration-level quantities derived from
    the engine state (e.g. the pace of :py:class:`gcl_monai.handlers.GradFilterPaceHandler`) follow.

    When the restored schedule spans another number of iterations than the one this run was configured with
    (the scheduler's ``T_max`` when the handler was attached; e.g. a finished run resumed with more epochs), the
    old cosine would go on (past its end ``CosineAnnealingLR`` rises again, and from its end at ``eta_min`` the
    recursive form stays there). The configured schedule is used instead: ``T_max`` is set to it and the
    learning rate to its closed form at the restored iteration,
    :math:`\\eta_{min} + (\\eta_0 - \\eta_{min})(1 + \\cos(\\pi t / T_{max})) / 2`, with a logged warning; the
    run then follows the cosine it would have had had it been configured so from the start.

    Args:
        lr_scheduler: iteration-level ``CosineAnnealingLR`` to rescale with the trainer, or None.

    Raises:
        TypeError: when ``lr_scheduler`` is neither None nor a ``CosineAnnealingLR``.
        ValueError: at ``Events.STARTED``, when the epoch length changed and the restored iteration is not at
            the end of an epoch.
    """

    def __init__(self, lr_scheduler: CosineAnnealingLR | None = None) -> None:
        if lr_scheduler is not None and not isinstance(lr_scheduler, CosineAnnealingLR):
            raise TypeError(f"lr_scheduler must be a CosineAnnealingLR or None, got {type(lr_scheduler).__name__}.")
        self.lr_scheduler = lr_scheduler
        self.epoch_length: int | None = None
        self.schedule_length: int | None = None

    def attach(self, engine: Engine) -> None:
        self.epoch_length = engine.state.epoch_length
        self.schedule_length = None if self.lr_scheduler is None else self.lr_scheduler.T_max
        engine.add_event_handler(Events.STARTED, self)

    def __call__(self, engine: Engine) -> None:
        old, new = engine.state.epoch_length, self.epoch_length
        if old is not None and new is not None and old != new:
            self._rescale(engine, old, new)
        if self.lr_scheduler is not None and self.lr_scheduler.T_max != self.schedule_length:
            self._reschedule(engine)

    def _reschedule(self, engine: Engine) -> None:
        scheduler, step = self.lr_scheduler, self.lr_scheduler.last_epoch
        engine.logger.warning(
            f"The checkpoint's cosine schedule spans {scheduler.T_max} iterations, this run's {self.schedule_length}"
            f" (were the epochs changed?): continuing at iteration {step} of the configured schedule."
        )
        scheduler.T_max = self.schedule_length
        cosine = (1 + math.cos(math.pi * step / scheduler.T_max)) / 2
        for group, base_lr in zip(scheduler.optimizer.param_groups, scheduler.base_lrs):
            group["lr"] = scheduler.eta_min + (base_lr - scheduler.eta_min) * cosine

    def _rescale(self, engine: Engine, old: int, new: int) -> None:
        if engine.state.iteration != engine.state.epoch * old:
            raise ValueError(
                f"the checkpoint was written at iteration {engine.state.iteration}, inside an epoch of {old} "
                f"iterations; resuming with {new} iterations per epoch needs an epoch-end checkpoint."
            )
        engine.state.epoch_length = new
        engine.state.iteration = engine.state.epoch * new
        if self.lr_scheduler is not None:
            self.lr_scheduler.last_epoch = self.lr_scheduler.last_epoch * new // old
            self.lr_scheduler.T_max = round(self.lr_scheduler.T_max * new / old)
