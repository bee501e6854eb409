"""Fine-tuning with a consistency loss on unlabelled slices: the semi-supervised baselines of the paper's Table 3."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from ignite.engine import Events
from ignite.handlers import EMAHandler
from monai.engines import SupervisedTrainer
from monai.utils import CommonKeys as Keys

from gcl_monai.losses.consistency import (
    InterpolationConsistency,
    MeanTeacherConsistency,
    VirtualAdversarialLoss,
    sigmoid_rampup,
)

__all__ = ["SEMI_SUPERVISED_METHODS", "SemiSupervisedTrainer"]

#: the ``semi_supervised`` switch's values: Mean Teacher, interpolation consistency (mixup), VAT.
SEMI_SUPERVISED_METHODS = ("mean_teacher", "mixup", "vat")


class SemiSupervisedTrainer(SupervisedTrainer):
    """
    ``SupervisedTrainer`` whose loss on a labelled batch is ``L_sup + w(t) * L_cons``, ``L_cons`` a consistency
    loss on a batch of unlabelled slices drawn at every iteration and ``w(t) = consistency_weight *
    sigmoid_rampup(t, rampup_iterations)``. With ``semi_supervised=None`` it is exactly ``SupervisedTrainer``.

    ``semi_supervised`` picks the consistency (``gcl_monai.losses.consistency``):

    - ``"mean_teacher"``: :class:`MeanTeacherConsistency` with an EMA teacher (Tarvainen & Valpola 2017);
    - ``"mixup"``: :class:`InterpolationConsistency`, mixup of unlabelled slices against the same mixup of the
      EMA teacher's predictions (Verma et al. 2019; mixup: Zhang et al. 2018);
    - ``"vat"``: :class:`VirtualAdversarialLoss` (Miyato et al. 2018), no teacher.

    The teacher is ignite's ``EMAHandler`` on the network, attached to this engine (``ema_momentum`` is ignite's
    momentum, ``1 - alpha`` in Mean Teacher's notation); :attr:`teacher` is its ``ema_model``, a copy of the network
    when training starts (after the train handlers, e.g. ``CheckpointLoader``, have initialised it). Every other
    argument is ``SupervisedTrainer``'s; the network's initialisation (random, SimCLR, GCL) is independent.
    The supervised and consistency terms of the last iteration are in ``state.output["supervised_loss"]`` and
    ``state.output["consistency_loss"]``.

    Args:
        args, kwargs: ``SupervisedTrainer``'s arguments.
        semi_supervised: None, ``"mean_teacher"``, ``"mixup"`` or ``"vat"``.
        unlabeled_data_loader: batches (dictionaries) of unlabelled slices; cycled as long as training runs.
        consistency_weight: the weight of ``L_cons`` after the ramp-up.
        rampup_iterations: iterations of the sigmoid ramp-up of the weight.
        ema_momentum: the teacher's EMA momentum (ignite's convention).
        noise_std: Mean Teacher's input noise.
        mixup_alpha: the Beta parameter of the mixing weights.
        vat_xi, vat_eps: VAT's finite-difference step and perturbation norm.
        image_key: key of the unlabelled images in a batch.

    Raises:
        ValueError: unknown ``semi_supervised``, or a switch without unlabelled slices.

    Example (bundle override)::

        python -m monai.bundle run --config_file configs/train.json --semi_supervised mean_teacher
    """

    def __init__(
        self,
        *args: Any,
        semi_supervised: str | None = None,
        unlabeled_data_loader: Iterable | None = None,
        consistency_weight: float = 0.1,
        rampup_iterations: int = 0,
        ema_momentum: float = 0.01,
        noise_std: float = 0.1,
        mixup_alpha: float = 0.2,
        vat_xi: float = 1e-6,
        vat_eps: float = 1.0,
        image_key: str = Keys.IMAGE,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.semi_supervised = semi_supervised
        self.teacher: torch.nn.Module | None = None
        if semi_supervised is None:
            return
        if semi_supervised not in SEMI_SUPERVISED_METHODS:
            raise ValueError(
                f"semi_supervised must be None or one of {SEMI_SUPERVISED_METHODS}, got {semi_supervised!r}."
            )
        if unlabeled_data_loader is None or len(getattr(unlabeled_data_loader, "dataset", ())) == 0:
            raise ValueError(f"semi_supervised={semi_supervised!r} needs unlabelled slices, but none were given.")
        if semi_supervised == "vat":
            self.consistency: Any = VirtualAdversarialLoss(xi=vat_xi, eps=vat_eps)
        else:
            ema = EMAHandler(self.network, momentum=ema_momentum)
            ema.attach(self)
            self.teacher = ema.ema_model
            # the teacher starts from the initialised student (handlers such as CheckpointLoader load it on STARTED)
            self.add_event_handler(Events.STARTED, self._start_teacher)
            if semi_supervised == "mean_teacher":
                self.consistency = MeanTeacherConsistency(self.teacher, noise_std=noise_std)
            else:
                self.consistency = InterpolationConsistency(self.teacher, alpha=mixup_alpha).set_random_state(
                    seed=int(torch.randint(2**31 - 1, ()).item())
                )
        self.unlabeled_data_loader = unlabeled_data_loader
        self.consistency_weight = consistency_weight
        self.rampup_iterations = rampup_iterations
        self.image_key = image_key
        self._unlabeled: Iterator | None = None
        self.supervised_loss = self.loss_function
        self.loss_function = self._semi_supervised_loss

    def _start_teacher(self) -> None:
        """Copy the student's weights into the teacher (the student unwrapped from ``DataParallel`` or
        ``DistributedDataParallel``, as ``EMAHandler`` unwraps it: the teacher is a copy of the inner module)."""
        student = self.network
        if isinstance(student, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            student = student.module
        self.teacher.load_state_dict(student.state_dict())

    def _unlabeled_images(self) -> torch.Tensor:
        """The next unlabelled batch's images, on the engine's device (the loader is restarted when exhausted)."""
        try:
            batch = next(self._unlabeled) if self._unlabeled is not None else None
        except StopIteration:
            batch = None
        if batch is None:
            self._unlabeled = iter(self.unlabeled_data_loader)
            batch = next(self._unlabeled)
        return torch.as_tensor(batch[self.image_key]).to(self.state.device, non_blocking=self.non_blocking)

    def _semi_supervised_loss(self, pred: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        """``L_sup(pred, label) + w(t) * L_cons(network, unlabelled images)``."""
        supervised = self.supervised_loss(pred, label).mean()
        consistency = self.consistency(self.network, self._unlabeled_images())
        weight = self.consistency_weight * sigmoid_rampup(self.state.iteration, self.rampup_iterations)
        self.state.output["supervised_loss"] = supervised.detach()
        self.state.output["consistency_loss"] = consistency.detach()
        return supervised + weight * consistency
