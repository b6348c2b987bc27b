"""How much does drawing a p99's two-stage replicates tail first save, and do they keep the law of the
sorted resamples? (a benchmark script, not a test; issue 16)

The gain-precision stop rule and the reported gain interval bootstrap a p99 ratio over every window of
a pair (``gpt_triton/measure/gain_precision.py``); racing bootstraps each contender's p99 every round.
With ``--windows`` windows of about ``--requests`` latencies each (a drifting scale, an exponential
tail, one window in twelve a burst three times slower, which is what this machine's runs look like),
this times both ways of drawing the same number of replicates, side by side and alternating:

* sort: ``_TwoStage.sorted_replicates`` (every latency resampled, every draw sorted);
* tail: ``tail_resample.upper_quantile_replicates`` (window counts, then binomial counts of each
  window's top values; a replicate that reads below the drawn tail is completed and sorted).

Printed per window count: the median seconds of each way over ``--repeats``, their ratio, the 95%
interval each gives, and the two-sample Kolmogorov-Smirnov p-value between the two sets of replicates
(a small p-value would say the laws differ).

    .venv/bin/python benchmarks/tail_bootstrap.py [--windows 24,48,72] [--requests 800] [--resamples 1000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy.stats import ks_2samp

from gpt_triton.measure import tail_resample
from gpt_triton.measure.stats import _TwoStage


def windows(count: int, requests: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for j in range(count):
        scale = (3.0 if j % 12 == 5 else 1.0) * (1 + 0.1 * rng.standard_normal() ** 2)
        n = int(requests * rng.uniform(0.75, 1.25))
        out.append(scale * (1.2 + rng.lognormal(-3.0, 0.5, n) + rng.exponential(0.15, n) * (rng.random(n) < 0.05)))
    return out


def timed(fn: Callable[..., np.ndarray], *args: object) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default="24,48,72")
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"# p99 two-stage replicates: {args.resamples} per call, windows of ~{args.requests} latencies, "
          f"median of {args.repeats} alternating repeats")
    for count in (int(c) for c in args.windows.split(",")):
        data = windows(count, args.requests, seed=count)
        sort_s, tail_s = [], []
        for r in range(args.repeats):
            first_sort = r % 2 == 0
            for way in (("sort", "tail") if first_sort else ("tail", "sort")):
                rng = np.random.default_rng(100 + r)
                if way == "sort":
                    s, by_sort = timed(_TwoStage(data).sorted_replicates, ["p99"], args.resamples, rng)
                    sort_s.append(s)
                else:
                    s, by_tail = timed(tail_resample.upper_quantile_replicates, data, [0.99], args.resamples, rng)
                    tail_s.append(s)
        a, b = by_sort[:, 0], by_tail[:, 0]
        print(f"{count} windows ({sum(w.size for w in data)} latencies): sort {np.median(sort_s):.3f} s, "
              f"tail {np.median(tail_s):.3f} s, sort/tail {np.median(sort_s) / np.median(tail_s):.1f}x; "
              f"95% interval sort [{np.quantile(a, 0.025):.4f}, {np.quantile(a, 0.975):.4f}] "
              f"tail [{np.quantile(b, 0.025):.4f}, {np.quantile(b, 0.975):.4f}]; KS p {ks_2samp(a, b).pvalue:.2f}")


if __name__ == "__main__":
    main()
