"""GradMitigator: softly align conflicting per-meta-label gradients towards EMA target cosine similarities."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from monai.utils import look_up_option

from gcl_monai.gradients.combiner import GradientCombiner, GradientLayout

__all__ = ["GradMitigator"]

#: the target cosine is clamped to [-1 + TARGET_MARGIN, 1 - TARGET_MARGIN] before it enters Eq. (3).
TARGET_MARGIN = 1e-6


class GradMitigator(GradientCombiner):
    """
    Gradient Mitigator of GCL (Algorithm 1 and Eq. (3)-(4) of the paper): the gradients ``g_m`` of the
    contrastive losses guided by ``M`` meta labels are combined into ``(1/M) sum_i g'_i``, where ``g'_i``
    starts from ``g_i`` and, for every other task ``j`` in increasing order, receives a component of the
    original gradient ``g_j`` whenever their cosine similarity ``w_ij = cos(g'_i, g_j)`` is below an
    exponential moving average target ``t_ij``:

    .. code-block:: text

        t_ij <- (1 - beta) t_ij + beta w_ij                                     (Eq. 4, updated first)
        if w_ij < t_ij:
            g'_i <- g'_i + |g'_i| (t_ij sqrt(1 - w_ij^2) - w_ij sqrt(1 - t_ij^2))
                           / (|g_j| sqrt(1 - t_ij^2)) g_j                       (Eq. 3, Law of Sines)

    After a correction ``cos(g'_i, g_j)`` equals ``t_ij``. The targets start at 0 and persist across calls.

    Algorithm 1 is the update of Gradient Vaccine (GradVac, Wang et al., ICLR 2021): an EMA of the observed
    cosine as the target similarity of two tasks' gradients (Eq. 4) and, below it, the correction of Eq. (3), which
    GradVac derives with the law of sines so that the corrected gradient reaches the target cosine. GCL applies it
    between meta labels, to every parameter tensor separately. As Algorithm 1 is written and implemented here, the
    target is updated before the comparison and the other tasks are visited in increasing order (GradVac, like
    PCGrad, visits them in random order).

    Persistent conflicts: the EMA target follows the observed cosine, so when two meta labels conflict at every
    step (``w_ij`` stays negative) the target settles at that negative value and ``w_ij < t_ij`` is then true only
    half of the time, by a vanishing margin: Algorithm 1 as written stops mitigating exactly the conflicts it is
    meant for. ``min_target`` (a departure from the paper, off by default) uses ``max(t_ij, min_target)`` as the
    target in the comparison and in Eq. (3) while the stored EMA still follows Eq. (4); with ``min_target=0`` a
    conflicting component is always removed down to orthogonality (as in PCGrad, Yu et al., NeurIPS 2020), and
    above the floor the paper's adaptive target applies unchanged.

    With ``granularity="parameter"`` (the paper: "all the parameters are updated individually") every
    parameter tensor has its own cosines and targets (state ``(M, M, P)`` for ``P`` parameters); with
    ``"global"`` all parameters are concatenated into one vector (state ``(M, M, 1)``).

    Implementation: every ``g'_i`` stays in the span of the original gradients, ``g'_i = sum_m c_im g_m``,
    so the gradients are packed once (see :class:`~gcl_monai.gradients.combiner.GradientLayout`), their
    per-parameter Gram matrix ``g_m . g_n`` is computed in one pass (accumulated in float64), Algorithm 1 is
    run on the ``(M, P)`` coefficients ``c_i`` (``g'_i . g_j = sum_m c_im G_mj``,
    ``|g'_i|^2 = c_i^T G c_i``), and the output ``sum_m a_m g_m`` is formed in a second pass. The only Python
    loop is over the ``M - 1`` steps of Algorithm 1's inner loop: at step ``t`` every ``g'_i`` meets its
    ``t``-th other task at once, vectorised over the tasks ``i`` and all parameters. The results match
    the explicit vector updates up to the float32 rounding of the Gram entries (relative ~1e-7 of
    ``|g|^2``; the tests check it against :py:func:`gcl_monai.gradients.algorithm1.algorithm1`, Algorithm 1's
    literal loop); a packing buffer of ``M`` gradient copies is kept between calls. Nothing in :meth:`combine`
    reads a value on the host (no ``.item()``, no branch on a tensor value): on an accelerator the call only
    queues kernels and returns, and :meth:`summary` with ``as_tensors=True`` keeps the statistics on the device.

    Degenerate inputs never produce NaN or inf in the output or in the targets:

        - undefined cosine: where ``|g'_i|`` or ``|g_j|`` is ``<= eps`` (e.g. a zero gradient) or is not
          representable (a squared norm or dot product that overflows), neither the target is updated nor a
          correction applied for that ``(i, j, parameter)``; ``last_cosine`` is NaN there.
        - non-finite entries (NaN/inf) in the gradient of task ``m`` for parameter ``p``: that whole tensor
          is treated as zero for this step (so task ``m`` contributes zero to the mean for ``p`` and its
          cosines with ``p`` are undefined, see above), and a ``RuntimeWarning`` naming ``m`` and ``p`` is
          emitted (on the CPU by this call; on an accelerator by the next :meth:`summary` or :meth:`state_dict`).
          With ``granularity="global"`` only the entries of parameter ``p`` are zeroed.
        - targets close to or at ``+-1``: the target is clamped to ``[-1 + 1e-6, 1 - 1e-6]`` before it is
          compared with ``w_ij`` and used in Eq. (3) (so the coefficient stays finite and non-negative); the
          stored EMA value itself is not clamped. ``w_ij`` is clamped to ``[-1, 1]`` against rounding.
        - exactly opposite gradients (``w_ij = -1``): Eq. (3) gives ``g'_i + (|g'_i| / |g_j|) g_j = 0``,
          i.e. the conflicting component cancels ``g'_i`` for that parameter.

    The computation runs under ``torch.no_grad()`` in float32 at least (float16/bfloat16 gradients are
    upcast; float64 stays float64) on the device of the first gradient; every output tensor has the shape
    and dtype of the corresponding gradient of task 0 and may be a view of one shared buffer.

    References:
        Wu et al., "GCL: Gradient-Guided Contrastive Learning for Medical Image Segmentation with
        Multi-Perspective Meta Labels", ACM MM 2023. https://doi.org/10.1145/3581783.3612113

        Wang et al., "Gradient Vaccine: Investigating and Improving Multi-task Optimization in Massively
        Multilingual Models", ICLR 2021. https://openreview.net/forum?id=F1vEjWK-lH_

    Args:
        num_tasks: number of meta labels ``M`` whose gradients are combined, at least 1.
        beta: EMA weight of the target cosine similarities (Eq. 4), in ``[0, 1]``. Defaults to 0.01 (paper).
        granularity: ``"parameter"`` (per parameter tensor) or ``"global"`` (whole gradient as one vector).
        eps: norms ``<= eps`` are treated as zero (undefined cosine). Defaults to 1e-12.
        min_target: lower bound of the target used in Eq. (3), in ``[-1, 1]``, or None (the paper: no bound).

    Raises:
        ValueError: When ``num_tasks < 1``, ``beta`` is not in ``[0, 1]``, ``eps < 0`` or ``granularity`` is
            not one of ``"parameter"``, ``"global"``, or ``min_target`` is not in ``[-1, 1]``.

    Example::

        mitigator = GradMitigator(num_tasks=2)
        grads = [torch.autograd.grad(loss, params, retain_graph=True) for loss in losses]
        for p, g in zip(params, mitigator.combine(grads)):
            p.grad = g
        optimizer.step()
    """

    def __init__(
        self,
        num_tasks: int,
        beta: float = 0.01,
        granularity: str = "parameter",
        eps: float = 1e-12,
        min_target: float | None = None,
    ) -> None:
        super().__init__(num_tasks)
        if min_target is not None and not -1.0 <= min_target <= 1.0:
            raise ValueError(f"min_target must be in [-1, 1] or None, got {min_target}.")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta}.")
        if eps < 0:
            raise ValueError(f"eps must be non-negative, got {eps}.")
        self.beta = float(beta)
        self.granularity = look_up_option(granularity, ("parameter", "global"))
        self.eps = float(eps)
        self.min_target = None if min_target is None else float(min_target)
        self._targets: torch.Tensor | None = None
        self._last_cosine: torch.Tensor | None = None
        self._last_acted: torch.Tensor | None = None
        self._last_change: torch.Tensor | None = None
        self._pending_non_finite: torch.Tensor | None = None
        self._step = 0

    @property
    def step(self) -> int:
        """Number of :meth:`combine` calls so far (restored by :meth:`load_state_dict`)."""
        return self._step

    @property
    def targets(self) -> torch.Tensor | None:
        """A copy of the ``(M, M, P)`` EMA targets ``t_ij`` (zero diagonal), ``None`` before the first call."""
        return None if self._targets is None else self._targets.clone()

    @property
    def last_cosine(self) -> torch.Tensor | None:
        """
        A copy of the ``(M, M, P)`` cosines ``w_ij`` of the last :meth:`combine` call (NaN on the diagonal and
        where undefined), ``None`` before the first call.
        """
        return None if self._last_cosine is None else self._last_cosine.clone()

    def combine(self, grads: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
        """
        Run one step of Algorithm 1 and advance the targets.

        Args:
            grads: ``num_tasks`` lists (one per meta label) of per-parameter gradients, same shapes across tasks.

        Returns:
            ``(1/M) sum_i g'_i``, one tensor per parameter with the shape and dtype of ``grads[0][p]``.

        Raises:
            ValueError: When ``grads`` does not hold ``num_tasks`` lists of tensors with matching shapes, or
                when the number of parameters differs from the one of the current (or loaded) targets.
            TypeError: When a gradient is not a floating point tensor.
        """
        layout = self._layout_for(grads, per_parameter=self.granularity == "parameter")
        self._prepare_state(layout)
        with torch.no_grad():
            g = layout.pack(grads)
            non_finite = self._zero_non_finite(g, layout)
            gram = self._gram(g, layout)
            norms = gram.diagonal().T.sqrt()
            # coef[i] holds the coefficients of g'_i over the original gradients; all i advance together, at step
            # t task i meets its t-th other task j = t + (i <= t) (increasing j, skipping i, as in Algorithm 1)
            tasks = torch.arange(self.num_tasks, device=gram.device)
            coef = torch.eye(self.num_tasks, dtype=gram.dtype, device=gram.device)
            coef = coef.unsqueeze(-1).repeat(1, 1, layout.num_segments)
            for t in range(self.num_tasks - 1):
                j = t + (tasks <= t).long()
                dot = (coef * gram.index_select(1, j).transpose(0, 1)).sum(dim=1)
                norm_i = torch.einsum("ims,mns,ins->is", coef, gram, coef).clamp_min(0.0).sqrt()
                coef[tasks, j] += self._pair_update(tasks, j, dot, norm_i, norms[j])
            weights = (coef / self.num_tasks).sum(dim=0)
            self._last_change = self._relative_change(weights, gram)
            weights = weights[:, layout.block_ids].to(g.dtype).unsqueeze(-1)
            out = torch.mul(g[0], weights[0])
            for m in range(1, self.num_tasks):
                out.addcmul_(weights[m], g[m])
        self._step += 1
        self._report_non_finite(non_finite)
        return layout.unpack(out, grads[0])

    def _relative_change(self, weights: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
        """``|sum_m a_m g_m - mean_m g_m| / |mean_m g_m|`` over all parameters: how far Algorithm 1 moved the update."""
        delta = weights - 1.0 / self.num_tasks
        moved = torch.einsum("ms,mns,ns->", delta, gram, delta).clamp_min(0.0)
        mean = torch.full_like(weights, 1.0 / self.num_tasks)
        plain = torch.einsum("ms,mns,ns->", mean, gram, mean).clamp_min(0.0)
        return (moved / plain.clamp_min(self.eps**2)).sqrt()

    @staticmethod
    def _gram(g: torch.Tensor, layout: GradientLayout) -> torch.Tensor:
        """The ``(M, M, S)`` per-segment Gram matrix ``g_m . g_n`` of the packed gradients, accumulated in float64."""
        blocks = torch.einsum("mkc,nkc->mnk", g, g)
        return layout.segment_sum(blocks.to(torch.float64 if g.device.type != "mps" else g.dtype))

    @staticmethod
    def _zero_non_finite(g: torch.Tensor, layout: GradientLayout) -> torch.Tensor:
        """
        Zero (in place) every parameter of every task in ``g`` that holds NaN/inf, without reading any value on
        the host; returns the ``(M, num_parameters)`` boolean mask of the zeroed parameters.
        """
        if g.dtype == torch.float64 or g.device.type == "mps":
            bad_blocks = ~torch.isfinite(g).all(dim=-1)
        else:  # one reading pass: a float64 sum of 256 finite float32 values cannot overflow, NaN/inf propagate
            bad_blocks = ~torch.isfinite(g.sum(dim=-1, dtype=torch.float64))
        bad = layout.segment_sum(bad_blocks.to(g.dtype), per_parameter=True) > 0
        g.masked_fill_(bad[:, layout.param_ids].unsqueeze(-1), 0)
        return bad

    def _report_non_finite(self, bad: torch.Tensor) -> None:
        """
        Warn about the parameters zeroed by :meth:`_zero_non_finite`: on the CPU at once; on an accelerator the masks
        are accumulated on the device (logical or) and the warning waits for the next :meth:`summary` or
        :meth:`state_dict` (a checkpoint), which read the device anyway. The training path never waits for the device.
        """
        if bad.device.type == "cpu":
            self._warn_non_finite(bad)
        else:
            pending = self._pending_non_finite
            self._pending_non_finite = bad if pending is None else pending | bad

    def _flush_non_finite(self) -> None:
        """Emit the warning of the masks accumulated on an accelerator."""
        if self._pending_non_finite is not None:
            self._warn_non_finite(self._pending_non_finite.cpu())
            self._pending_non_finite = None

    @staticmethod
    def _warn_non_finite(bad: torch.Tensor) -> None:
        for m, row in enumerate(bad.tolist()):
            params = [p for p, is_bad in enumerate(row) if is_bad]
            if params:
                warnings.warn(
                    f"GradMitigator: the gradient of task {m} has non-finite entries in parameter(s) {params}; "
                    "they are treated as zero for this step.",
                    RuntimeWarning,
                    stacklevel=4,
                )

    def _prepare_state(self, layout: GradientLayout) -> None:
        """Create the targets lazily (or move the loaded ones to the gradients' device/dtype), reset the cosines."""
        num_segments, device = layout.num_segments, layout.block_ids.device
        shape = (self.num_tasks, self.num_tasks, num_segments)
        if self._targets is None:
            self._targets = torch.zeros(shape, device=device, dtype=layout.dtype)
        elif self._targets.shape[-1] != num_segments:
            raise ValueError(
                f"GradMitigator targets were created for {self._targets.shape[-1]} parameter(s) "
                f"(by an earlier combine or load_state_dict), but combine() received {num_segments}."
            )
        else:
            self._targets = self._targets.to(device=device, dtype=layout.dtype)
        self._last_cosine = torch.full(shape, float("nan"), device=device, dtype=layout.dtype)
        self._last_acted = torch.zeros(shape, device=device, dtype=torch.bool)

    def _pair_update(
        self, i: torch.Tensor, j: torch.Tensor, dot: torch.Tensor, norm_i: torch.Tensor, norm_j: torch.Tensor
    ) -> torch.Tensor:
        """
        Update ``t_ij`` (Eq. 4) for the task pairs ``(i[k], j[k])`` and every segment and return the ``(pairs, S)``
        coefficients ``mu`` of ``g_j`` in Eq. (3) (zero where no correction applies).
        """
        valid = (norm_i > self.eps) & (norm_j > self.eps) & norm_i.isfinite() & norm_j.isfinite() & dot.isfinite()
        w = torch.where(valid, dot / norm_j / norm_i, 0.0).clamp(-1.0, 1.0)
        target = torch.where(valid, (1.0 - self.beta) * self._targets[i, j] + self.beta * w, self._targets[i, j])
        self._targets[i, j] = target.to(self._targets.dtype)
        self._last_cosine[i, j] = torch.where(valid, w, float("nan")).to(self._last_cosine.dtype)
        if self.min_target is not None:
            target = target.clamp_min(self.min_target)
        target = target.clamp(-1.0 + TARGET_MARGIN, 1.0 - TARGET_MARGIN)
        sin_target = (1.0 - target * target).sqrt()
        mu = norm_i / norm_j * (target * (1.0 - w * w).sqrt() - w * sin_target) / sin_target
        acted = valid & (w < target)
        self._last_acted[i, j] = acted
        return torch.where(acted, mu, 0.0)

    @property
    def last_acted(self) -> torch.Tensor | None:
        """
        A copy of the ``(M, M, P)`` boolean mask of the last :meth:`combine` call: where Eq. (3) changed ``g'_i``
        (``w_ij`` below the target), ``None`` before the first call.
        """
        return None if self._last_acted is None else self._last_acted.clone()

    def summary(self, as_tensors: bool = False) -> dict[str, float] | dict[str, torch.Tensor]:
        """
        Args:
            as_tensors: return 0-d tensors on the gradients' device instead of floats: nothing waits for the
                device (for logging every iteration, e.g. by :py:class:`gcl_monai.handlers.GradientCombinerHandler`;
                ``float()`` of an entry reads it). With the default the values are read in one transfer, and
                the warnings about non-finite gradients still pending on an accelerator are emitted.

        Returns:
            for every pair ``i != j``: ``cos_i_j``, the mean over parameters of the last cosines (ignoring
            undefined ones; NaN if all are undefined), ``target_i_j``, the mean over parameters of the
            targets, and ``acted_i_j``, the fraction of parameters whose ``g'_i`` Eq. (3) changed with ``g_j``
            in the last call, and ``change``: ``|update - mean_m g_m| / |mean_m g_m|`` of the last call (0 when
            nothing was mitigated). Empty before the first :meth:`combine` (only targets after a
            :meth:`load_state_dict`).
        """
        names: list[str] = []
        values: list[torch.Tensor] = []
        pairs = [(i, j) for i in range(self.num_tasks) for j in range(self.num_tasks) if i != j]
        for prefix, per_pair in (
            ("cos", None if self._last_cosine is None else torch.nanmean(self._last_cosine, dim=-1)),
            ("target", None if self._targets is None else self._targets.mean(dim=-1)),
            ("acted", None if self._last_acted is None else self._last_acted.to(self._last_cosine.dtype).mean(-1)),
        ):
            if per_pair is not None:
                names += [f"{prefix}_{i}_{j}" for i, j in pairs]
                values.append(per_pair.flatten()[_off_diagonal(self.num_tasks, per_pair.device)])
        if self._last_change is not None:
            names.append("change")
            values.append(self._last_change.reshape(1))
        if not values:
            return {}
        dtype = torch.float32 if values[0].device.type == "mps" else torch.float64
        stacked = torch.cat([v.to(dtype) for v in values])
        if as_tensors:
            return dict(zip(names, stacked.unbind()))
        self._flush_non_finite()
        return dict(zip(names, stacked.tolist()))

    def state_dict(self) -> dict[str, Any]:
        """
        Returns:
            ``{"num_tasks", "granularity", "step", "targets"}`` (``targets`` is ``None`` before the first call).
            Emits the warnings about non-finite gradients still pending on an accelerator.
        """
        self._flush_non_finite()
        return {
            "num_tasks": self.num_tasks,
            "granularity": self.granularity,
            "step": self._step,
            "targets": None if self._targets is None else self._targets.detach().clone(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """
        Restore the targets and step counter, e.g. before or after the first :meth:`combine` of a resumed run.
        The number of parameters of the targets is checked at the next :meth:`combine`.

        Args:
            state_dict: a dictionary returned by :meth:`state_dict`.

        Raises:
            KeyError: When an entry is missing.
            ValueError: When ``num_tasks`` or ``granularity`` differ from this instance, or the targets are not
                a finite ``(num_tasks, num_tasks, P)`` tensor with values in ``[-1, 1]`` (``P == 1`` for
                ``"global"``).
        """
        self._check_num_tasks(state_dict)
        missing = {"granularity", "step", "targets"} - set(state_dict)
        if missing:
            raise KeyError(f"GradMitigator state_dict misses the entries {sorted(missing)}.")
        if state_dict["granularity"] != self.granularity:
            raise ValueError(
                f"GradMitigator state_dict was saved with granularity={state_dict['granularity']!r}, "
                f"this instance has granularity={self.granularity!r}."
            )
        targets = state_dict["targets"]
        if targets is not None:
            targets = torch.as_tensor(targets).detach().clone()
            expected = f"({self.num_tasks}, {self.num_tasks}, {'1' if self.granularity == 'global' else 'P'})"
            if (
                targets.ndim != 3
                or targets.shape[:2] != (self.num_tasks, self.num_tasks)
                or targets.shape[2] < 1
                or (self.granularity == "global" and targets.shape[2] != 1)
            ):
                raise ValueError(f"GradMitigator targets must have shape {expected}, got {tuple(targets.shape)}.")
            if not bool(torch.isfinite(targets).all()) or bool(targets.abs().max() > 1):
                raise ValueError("GradMitigator targets must be finite cosine similarities in [-1, 1].")
        self._targets = targets
        self._step = int(state_dict["step"])
        self._last_cosine = None
        self._last_acted = None
        self._last_change = None


def _off_diagonal(num_tasks: int, device: torch.device) -> torch.Tensor:
    """Flat indices of the off-diagonal entries of an ``(M, M)`` matrix, row by row, built on ``device``."""
    k = torch.arange(num_tasks * (num_tasks - 1), device=device)
    i, j = k // max(num_tasks - 1, 1), k % max(num_tasks - 1, 1)
    return i * num_tasks + j + (j >= i).long()
