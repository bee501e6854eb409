"""
Intervals of a method's difference to a baseline that include the variance of the method's pre-training seed, and
the Holm correction of a family of comparisons.

A pre-trained method fine-tuned from S pre-training seeds on the same D labelled draws as its baseline gives the
paired differences :math:`\\Delta_{sd}` (method from seed s on draw d minus the baseline on draw d). Modelled as
:math:`\\Delta_{sd} = \\mu + a_s + b_d + e_{sd}` with independent seed, draw and residual effects (variances
:math:`\\sigma_a^2, \\sigma_b^2, \\sigma_e^2`), the mean :math:`\\bar\\Delta` has variance
:math:`\\sigma_a^2 / S + \\sigma_b^2 / D + \\sigma_e^2 / (S D)`, estimated without bias from the two-way ANOVA mean
squares as :math:`(MS_a + MS_b - MS_e) / (S D)`; the interval is a t-interval with Satterthwaite's degrees of
freedom (Satterthwaite, Biometrics Bulletin 1946). With one seed the seed variance cannot be estimated and no
interval is given: an interval over the draws alone describes one encoder, not the method. That interval, the paired
t-interval over the draws of one pre-trained encoder, is :py:func:`encoder_difference`: an experiment with one
pre-training seed per method answers what these encoders give, not what the method gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests

__all__ = ["SeedAwareDifference", "encoder_difference", "holm", "seed_aware_difference"]


@dataclass(frozen=True)
class SeedAwareDifference:
    """
    Mean paired difference over S pre-training seeds x D draws, its 95 % interval, degrees of freedom and two-sided
    p-value (H0: mean 0), and the variance components (seed, draw, residual) estimated from the mean squares.
    """

    mean: float
    low: float
    high: float
    df: float
    p: float
    seeds: int
    draws: int
    var_seed: float
    var_draw: float
    var_residual: float

    def __str__(self) -> str:
        if not math.isfinite(self.low):
            return f"{self.mean:+.3f} (S={self.seeds}, D={self.draws}: no interval)"
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}] (S={self.seeds}, D={self.draws}, p={self.p:.3g})"


def seed_aware_difference(differences: Sequence[Sequence[float]], level: float = 0.95) -> SeedAwareDifference:
    """
    The mean of ``differences`` (S x D: pre-training seeds x labelled draws) and its interval, see the module.

    Raises:
        ValueError: not a complete S x D table of finite values, or fewer than 2 draws.
    """
    d = np.asarray(differences, dtype=float)
    if d.ndim != 2 or d.shape[1] < 2 or not np.isfinite(d).all():
        raise ValueError(f"need a complete seeds x draws table of finite differences (D >= 2), got shape {d.shape}.")
    s, n = d.shape
    mean = float(d.mean())
    if s < 2:
        return SeedAwareDifference(mean, math.nan, math.nan, math.nan, math.nan, s, n, math.nan, math.nan, math.nan)
    seed_means, draw_means = d.mean(1), d.mean(0)
    ms_a = n * float(((seed_means - mean) ** 2).sum()) / (s - 1)
    ms_b = s * float(((draw_means - mean) ** 2).sum()) / (n - 1)
    resid = d - seed_means[:, None] - draw_means[None, :] + mean
    ms_e = float((resid**2).sum()) / ((s - 1) * (n - 1))
    # MS_a + MS_b - MS_e can fall below MS_a or MS_b by chance: never below either (a variance component >= 0)
    combination = {
        ms_a + ms_b - ms_e: [(ms_a, s - 1), (ms_b, n - 1), (ms_e, (s - 1) * (n - 1))],
        ms_b: [(ms_b, n - 1)],
        ms_a: [(ms_a, s - 1)],
    }
    total = max(combination)
    var_mean = total / (s * n)
    df = total**2 / sum(ms**2 / f for ms, f in combination[total]) if total > 0 else float(n - 1)
    se = math.sqrt(var_mean)
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    p = float(2 * stats.t.sf(abs(mean) / se, df)) if se > 0 else (0.0 if mean != 0 else 1.0)
    return SeedAwareDifference(
        mean,
        mean - half,
        mean + half,
        float(df),
        p,
        s,
        n,
        var_seed=max((ms_a - ms_e) / n, 0.0),
        var_draw=max((ms_b - ms_e) / s, 0.0),
        var_residual=ms_e,
    )


def encoder_difference(differences: Sequence[Sequence[float]], level: float = 0.95) -> SeedAwareDifference:
    """
    The paired t-interval over the draws of one pre-training seed's encoder (``differences``: 1 x D): the mean,
    ``level`` interval (``scipy.stats.ttest_1samp``, D - 1 degrees of freedom) and two-sided p-value. The seed's
    variance is not in it (``var_seed`` is NaN): it describes this encoder, not the method.

    Raises:
        ValueError: not one row of at least 2 finite differences.
    """
    d = np.asarray(differences, dtype=float)
    if d.ndim != 2 or d.shape[0] != 1 or d.shape[1] < 2 or not np.isfinite(d).all():
        raise ValueError(f"need one seed's row of at least 2 finite differences, got shape {d.shape}.")
    test = stats.ttest_1samp(d[0], 0.0)
    low, high = test.confidence_interval(level)
    var = float(d[0].var(ddof=1))
    p = float(test.pvalue) if var > 0 else (0.0 if d.mean() != 0 else 1.0)
    return SeedAwareDifference(
        float(d.mean()), float(low), float(high), float(test.df), p, 1, d.shape[1], math.nan, var, math.nan
    )


def holm(p_values: Sequence[float], alpha: float = 0.05) -> tuple[list[bool], list[float]]:
    """Holm's step-down correction of a family of p-values (``statsmodels``' ``multipletests``): which are rejected
    at family-wise level ``alpha``, and the adjusted p-values."""
    reject, adjusted, _, _ = multipletests(list(p_values), alpha=alpha, method="holm")
    return [bool(r) for r in reject], [float(a) for a in adjusted]
