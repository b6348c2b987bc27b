"""Clopper-Pearson: closed forms, monotonicity, and a simulation that it covers at its stated level."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gpt_triton.accuracy.bounds import clopper_pearson_upper


def test_closed_forms_and_monotonicity():
    for n in (1, 7, 30, 200):
        assert clopper_pearson_upper(0, n, 0.95) == pytest.approx(1 - 0.05 ** (1 / n))
        assert clopper_pearson_upper(n, n, 0.95) == 1.0
    assert clopper_pearson_upper(0, 0, 0.95) == 1.0
    assert clopper_pearson_upper(0, 100, 0.95) == pytest.approx(3 / 100, rel=0.02)  # rule of three
    bounds = [clopper_pearson_upper(k, 50, 0.95) for k in range(51)]
    assert all(a < b for a, b in zip(bounds, bounds[1:], strict=False))
    assert clopper_pearson_upper(2, 50, 0.99) > clopper_pearson_upper(2, 50, 0.9)
    assert clopper_pearson_upper(5, 100, 0.95) < clopper_pearson_upper(5, 50, 0.95)
    with pytest.raises(ValueError):
        clopper_pearson_upper(3, 2, 0.95)
    with pytest.raises(ValueError):
        clopper_pearson_upper(0, 2, 1.0)


@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_bound_covers_true_rate_at_stated_level(confidence):
    """2000 simulated experiments per (rate, n): the bound must be >= the true rate at least c of the time."""
    rng = np.random.default_rng(12345)
    experiments = 2000
    slack = 3 * np.sqrt(confidence * (1 - confidence) / experiments)  # Monte-Carlo error of the estimate
    for rate in (0.001, 0.01, 0.05, 0.2, 0.5):
        for n in (10, 30, 100, 400):
            table = np.array([clopper_pearson_upper(k, n, confidence) for k in range(n + 1)])
            ks = rng.binomial(n, rate, size=experiments)
            simulated = float(np.mean(table[ks] >= rate))
            assert simulated >= confidence - slack, (rate, n, simulated)
            exact = float(np.sum(stats.binom.pmf(np.arange(n + 1), n, rate)[table >= rate]))
            assert exact >= confidence - 1e-12, (rate, n, exact)
            # ...and it is informative, not the trivial bound 1
            if n >= 100:
                assert float(np.median(table[ks])) < 1.0 and float(np.median(table[ks])) < rate + 0.2
