"""Exact (Clopper-Pearson) bounds on an exceedance rate from k failing requests out of n."""

from __future__ import annotations


def clopper_pearson_upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided upper bound U with P(rate <= U) >= confidence, whatever the true rate.

    k = 0 gives 1 - (1 - c)^(1/n) (the "rule of three" is its approximation: 3/n at 95%); k = n gives 1.
    With no requests nothing is known, so the bound is 1.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0 or k == n:
        return 1.0
    from scipy import stats  # imported here: importing the records must stay cheap

    return float(stats.beta.ppf(confidence, k + 1, n - k))
