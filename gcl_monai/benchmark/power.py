"""
What a number of paired labelled draws can resolve: the power of the two-sided paired t-test whose 95% intervals the
report prints (the test on the per-draw differences, i.e. a one-sample t-test; statsmodels' ``TTestPower``).

A difference that is not resolved is only informative next to the difference the draws could have resolved: with
the spread of the paired differences measured so far, :py:func:`detectable_difference` is the smallest true mean
difference that this many pairs detect with 80% power, and :py:func:`pairs_needed` the number of pairs that a
given difference needs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
from statsmodels.stats.power import TTestPower

__all__ = ["POWER", "ALPHA", "detectable_difference", "pairs_needed", "spread"]

#: power and two-sided level at which the report states what the draws resolve
POWER = 0.8
ALPHA = 0.05


def spread(differences: Sequence[float]) -> float:
    """Sample standard deviation of paired differences (NaN with fewer than two)."""
    d = np.asarray(differences, dtype=float)
    return float(d.std(ddof=1)) if len(d) >= 2 else math.nan


def detectable_difference(sd: float, n: int, power: float = POWER, alpha: float = ALPHA) -> float:
    """
    Smallest true mean difference that ``n`` pairs with standard deviation ``sd`` of their differences detect with
    probability ``power`` in a two-sided paired t-test at level ``alpha`` (NaN for ``n < 2`` or ``sd`` not
    positive and finite).
    """
    if n < 2 or not 0 < sd < math.inf:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels' convergence notes; the result is checked in the tests
        effect = TTestPower().solve_power(nobs=n, alpha=alpha, power=power, alternative="two-sided")
    return float(effect) * sd


def pairs_needed(sd: float, difference: float, power: float = POWER, alpha: float = ALPHA) -> int | None:
    """
    Number of pairs for which a two-sided paired t-test at level ``alpha`` detects a true mean ``difference`` with
    probability at least ``power``, at standard deviation ``sd`` of the differences (None when ``sd`` is not
    positive and finite or ``difference`` is 0).
    """
    if not 0 < sd < math.inf or difference == 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        n = TTestPower().solve_power(effect_size=abs(difference) / sd, alpha=alpha, power=power,
                                     alternative="two-sided")
    return max(2, math.ceil(float(n)))
