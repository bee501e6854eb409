"""Consistency losses of semi-supervised segmentation on unlabelled slices (the paper's Table 3 baselines)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from monai.transforms import MixUp
from torch import nn

__all__ = ["sigmoid_rampup", "MeanTeacherConsistency", "InterpolationConsistency", "VirtualAdversarialLoss"]


def sigmoid_rampup(step: int | float, length: int | float) -> float:
    """
    The ramp-up of a consistency weight, ``exp(-5 (1 - t)^2)`` with ``t = min(step / length, 1)`` (Laine & Aila,
    "Temporal ensembling for semi-supervised learning", ICLR 2017, Sec. 3.1; used by Mean Teacher and ICT).

    Args:
        step: the current training iteration.
        length: iterations until the full weight (``length <= 0``: full weight from the start).

    Example:
        >>> round(sigmoid_rampup(50, 100), 4)
        0.2865
    """
    if length <= 0:
        return 1.0
    t = min(max(float(step), 0.0), float(length)) / float(length)
    return math.exp(-5.0 * (1.0 - t) ** 2)


def _softmax_mse(student_logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Mean over pixels and classes of ``(softmax(student) - target)^2`` (Tarvainen & Valpola 2017, Sec. 3)."""
    return torch.mean((torch.softmax(student_logits, dim=1) - target_probs) ** 2)


def _teacher_probs(teacher: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The teacher's softmax outputs on ``images``, the teacher in eval mode and without gradient (its weights
    follow the student's, they receive no gradient)."""
    teacher.eval()
    with torch.no_grad():
        return torch.softmax(teacher(images), dim=1)


class MeanTeacherConsistency:
    """
    Mean Teacher's consistency cost ``J = E || f(x + eta', theta') - f(x + eta, theta) ||^2`` on softmax outputs
    (Tarvainen & Valpola, NeurIPS 2017, Eq. 1), the teacher ``theta'`` being an exponential moving average of the
    student's weights (ignite's ``EMAHandler``, Eq. 2) that receives no gradient.

    The noises ``eta, eta'`` are independent Gaussian input noises, clipped at ``2 * noise_std`` (the image is
    also augmented by the data pipeline before).

    Args:
        teacher: the teacher network (e.g. ``EMAHandler(network).ema_model``), run in eval mode without gradient.
        noise_std: standard deviation of the input noises (0: none).

    Example:
        >>> ema = ignite.handlers.EMAHandler(net, momentum=0.01)
        >>> loss = MeanTeacherConsistency(ema.ema_model)(net, unlabelled_images)
    """

    def __init__(self, teacher: nn.Module, noise_std: float = 0.1):
        if noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {noise_std}.")
        self.teacher = teacher
        self.noise_std = noise_std

    def _noisy(self, images: torch.Tensor) -> torch.Tensor:
        if self.noise_std == 0:
            return images
        noise = torch.randn_like(images) * self.noise_std
        return images + noise.clamp(-2 * self.noise_std, 2 * self.noise_std)

    def __call__(self, network: nn.Module, images: torch.Tensor) -> torch.Tensor:
        """
        Args:
            network: the student (in train mode; gradients flow through it).
            images: unlabelled images, ``(B, C, H, W)``.

        Returns:
            the scalar consistency cost.
        """
        target = _teacher_probs(self.teacher, self._noisy(images))
        return _softmax_mse(network(self._noisy(images)), target)


class InterpolationConsistency:
    """
    Interpolation consistency (Verma et al., "Interpolation consistency training for semi-supervised learning",
    IJCAI 2019, Eq. 5): the student's prediction on a mixup of two unlabelled images ``Mix_l(u_j, u_k)`` is pulled
    towards the same mixup of the teacher's predictions, ``Mix_l(f(u_j, theta'), f(u_k, theta'))``, with
    ``l ~ Beta(alpha, alpha)`` per pair (mixup, Zhang et al., ICLR 2018). The pairs and weights come from MONAI's
    ``MixUp``, applied with the same draw to the images and to the teacher's softmax outputs.

    Args:
        teacher: the teacher network (e.g. an ``EMAHandler``'s ``ema_model``), run in eval mode without gradient.
        alpha: the Beta distribution's parameter.

    Example:
        >>> loss = InterpolationConsistency(ema.ema_model, alpha=0.2)(net, unlabelled_images)
    """

    def __init__(self, teacher: nn.Module, alpha: float = 0.2):
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0, got {alpha}.")
        self.teacher = teacher
        self.alpha = alpha
        self.mixup = MixUp(batch_size=1, alpha=alpha)

    def set_random_state(self, seed: int | None = None) -> InterpolationConsistency:
        """Seed the draws of the pairs and mixing weights."""
        self.mixup.set_random_state(seed=seed)
        return self

    def __call__(self, network: nn.Module, images: torch.Tensor) -> torch.Tensor:
        """
        Args:
            network: the student (in train mode; gradients flow through it).
            images: unlabelled images, ``(B, C, H, W)``.

        Returns:
            the scalar consistency cost.
        """
        target = _teacher_probs(self.teacher, images)
        self.mixup.batch_size = images.shape[0]
        mixed_images, mixed_target = self.mixup(images, target)
        return _softmax_mse(network(mixed_images), mixed_target)


def _l2_normalize(d: torch.Tensor) -> torch.Tensor:
    """Each sample of the batch scaled to unit L2 norm."""
    norm = d.flatten(1).norm(dim=1).clamp_min(1e-12)
    return d / norm.view(-1, *([1] * (d.dim() - 1)))


def _kl_per_pixel(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """``KL(softmax(p) || softmax(q))`` summed over classes, averaged over pixels and the batch."""
    log_p, log_q = F.log_softmax(logits_p, dim=1), F.log_softmax(logits_q, dim=1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=1).mean()


class VirtualAdversarialLoss:
    """
    Virtual adversarial training's local distributional smoothness (Miyato et al., TPAMI 2018, Eqs. 5-7 and 12):
    ``LDS(x) = KL(p(y | x) || p(y | x + r_adv))`` with ``r_adv = eps * g / ||g||``,
    ``g = grad_r KL(p(y | x) || p(y | x + r)) at r = xi * d``, ``d`` a random unit vector refined by power
    iteration (Eq. 12); ``p(y | x)`` is a constant (no gradient) and the KL is per pixel, averaged.
    Norms are L2 norms per slice.

    Args:
        xi: the finite-difference step of the power iteration.
        eps: the norm of the adversarial perturbation.
        num_power_iterations: power iterations (the paper: 1 suffices).

    Example:
        >>> loss = VirtualAdversarialLoss(xi=1e-6, eps=1.0)(net, unlabelled_images)
    """

    def __init__(self, xi: float = 1e-6, eps: float = 1.0, num_power_iterations: int = 1):
        if xi <= 0 or eps <= 0 or num_power_iterations < 1:
            raise ValueError(
                f"xi and eps must be > 0 and num_power_iterations >= 1, got {xi}, {eps}, {num_power_iterations}."
            )
        self.xi = xi
        self.eps = eps
        self.num_power_iterations = num_power_iterations

    def perturbation(self, network: nn.Module, images: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """
        The adversarial perturbation ``r_adv`` (Eq. 12).

        Args:
            network: the classifier.
            images: the inputs ``x``.
            logits: ``network(images)``, detached.

        Returns:
            ``r_adv``, of the shape of ``images`` and L2 norm ``eps`` per sample.
        """
        d = _l2_normalize(torch.randn_like(images))
        for _ in range(self.num_power_iterations):
            d = (self.xi * d).requires_grad_(True)
            distance = _kl_per_pixel(logits, network(images + d))
            (grad,) = torch.autograd.grad(distance, d)
            d = _l2_normalize(grad.detach())
        return self.eps * d

    def __call__(self, network: nn.Module, images: torch.Tensor) -> torch.Tensor:
        """
        Args:
            network: the network being trained (gradients flow through ``p(y | x + r_adv)`` only).
            images: unlabelled images, ``(B, C, H, W)``.

        Returns:
            the scalar LDS, averaged over the batch.
        """
        with torch.no_grad():
            logits = network(images)
        r_adv = self.perturbation(network, images, logits)
        return _kl_per_pixel(logits, network(images + r_adv))
