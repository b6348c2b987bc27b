"""Could a burn-in end when the data say the server has settled? MSER's power on burn-in windows (a benchmark
script, not a test; issue 16)

The burn-in (``measure.burn_in_s``) is a fixed stretch. A warm-up rule such as MSER-5 (White 1997; Hoad,
Robinson and Davies 2010) would read its end from the data: the truncation point that minimises the squared
standard error of what is left, and "not settled yet" when that point lies in the second half. This
script asks whether it can tell, at the noise of a burn-in's windows, by simulation: series of per-window
log p99 with Student-t noise (5 df, scale ``--noise``; a conv_attention window's log p99 varies about
0.15), either stationary or with a transient of ``--transient`` in the log that decays with time constant
``--tau-s`` (the young server's: 20 s), windows of ``--window-s``. It prints how often the rule says "not
settled" for each, for several batch sizes and tail lengths. A useful rule says it far more often with the
transient than without.

    .venv/bin/python benchmarks/mser_power.py [--windows 40 80] [--reps 1500]
"""

from __future__ import annotations

import argparse

import numpy as np


def not_settled(series: np.ndarray, batch: int, tail: int) -> bool:
    """MSER-``batch`` over ``series``, truncation points leaving at least ``tail`` batch means; True when
    the best point lies past the middle."""
    batches = len(series) // batch
    means = series[: batches * batch].reshape(batches, batch).mean(axis=1)
    scores = [np.var(means[d:]) / (batches - d) for d in range(batches - tail + 1)]
    return int(np.argmin(scores)) > batches // 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, nargs="+", default=[40, 80])
    parser.add_argument("--reps", type=int, default=1500)
    parser.add_argument("--noise", type=float, default=0.15)
    parser.add_argument("--transient", type=float, default=0.2)
    parser.add_argument("--tau-s", type=float, default=20.0)
    parser.add_argument("--window-s", type=float, default=0.75)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    for n in args.windows:
        t = np.arange(n) * args.window_s
        shift = -args.transient * np.exp(-t / args.tau_s)
        for batch, tail in ((1, 10), (2, 5), (2, 6), (3, 4), (5, 3)):
            flat = still = 0
            for _ in range(args.reps):
                noise = rng.standard_t(5, n) * args.noise
                flat += not_settled(noise, batch, tail)
                still += not_settled(noise + shift, batch, tail)
            print(f"{n} windows, MSER-{batch} (tail >= {tail} batch means): 'not settled' for a stationary series "
                  f"{flat / args.reps:.3f}, with the transient {still / args.reps:.3f}")


if __name__ == "__main__":
    main()
