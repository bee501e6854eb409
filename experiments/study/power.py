"""
What a number of paired labelled draws can resolve: the power of the two-sided paired t-test whose 95% intervals the
report prints (the t-test on the per-draw differences).

A difference that is not resolved is only informative next to the difference the draws could have resolved: with
the spread of the paired differences measured so far, :py:func:`detectable_difference` is the smallest true mean
difference that this many pairs detect with 80% power, and :py:func:`pairs_needed` the number of pairs that a
given difference needs. The power is that of the noncentral t distribution (``scipy.stats.nct``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

__all__ = ["ALPHA", "POWER", "detectable_difference", "paired_t_power", "pairs_needed", "spread"]

#: power and two-sided level at which the report states what the draws resolve
POWER = 0.8
ALPHA = 0.05


def spread(differences: Sequence[float]) -> float:
    """Sample standard deviation of paired differences (NaN with fewer than two)."""
    d = np.asarray(differences, dtype=float)
    return float(d.std(ddof=1)) if len(d) >= 2 else math.nan


def paired_t_power(difference: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """
    Probability that a two-sided paired t-test at level ``alpha`` on ``n`` pairs rejects "no difference" when the
    true mean difference is ``difference`` and the differences have standard deviation ``sd``: with
    :math:`t^* = t_{1-\\alpha/2, n-1}` and noncentrality :math:`\\delta = d\\sqrt{n}/s`,
    :math:`P(T > t^*) + P(T < -t^*)` for :math:`T` noncentral t with ``n - 1`` degrees of freedom.
    """
    critical = stats.t.ppf(1 - alpha / 2, n - 1)
    noncentrality = abs(difference) * math.sqrt(n) / sd  # the two-sided test's power is symmetric in the sign
    far_tail = stats.nct.cdf(-critical, n - 1, noncentrality)
    if not math.isfinite(far_tail):
        # scipy returns NaN where this tail is tiny; it lies between 0 and P(T < 0) = Phi(-noncentrality)
        far_tail = stats.norm.cdf(-noncentrality)
    return float(stats.nct.sf(critical, n - 1, noncentrality) + far_tail)


def detectable_difference(sd: float, n: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """
    Smallest true mean difference that ``n`` pairs with standard deviation ``sd`` of their differences detect with
    probability ``power`` in a two-sided paired t-test at level ``alpha`` (NaN for ``n < 2`` or ``sd`` not
    positive and finite).
    """
    if n < 2 or not 0 < sd < math.inf:
        return math.nan
    # in units of sd the power rises from alpha at 0: double the bracket until it holds the wanted power
    high = 1.0
    while paired_t_power(high, 1.0, n, alpha) < power:
        high *= 2
    return optimize.brentq(lambda e: paired_t_power(e, 1.0, n, alpha) - power, 0.0, high, xtol=1e-12) * sd


def pairs_needed(sd: float, difference: float, power: float = POWER, alpha: float = ALPHA) -> int | None:
    """
    Smallest number of pairs for which a two-sided paired t-test at level ``alpha`` detects a true mean
    ``difference`` with probability at least ``power``, at standard deviation ``sd`` of the differences (None when
    ``sd`` is not positive and finite or ``difference`` is 0).
    """
    if not 0 < sd < math.inf or difference == 0:
        return None

    def enough(n: int) -> bool:
        return paired_t_power(abs(difference), sd, n, alpha) >= power

    # the power grows with n: double until it suffices, then bisect
    high = 2
    while not enough(high):
        high *= 2
    low = high // 2  # not enough (or 1, below the smallest test)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high
