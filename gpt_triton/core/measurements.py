"""Measurement records: one window, and the statistics of a candidate at one load level."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field
from scipy import stats


class LoadProfile(BaseModel):
    kind: Literal["concurrency", "rate", "replay"] = "concurrency"
    concurrency: int = 1
    rate: float = 0.0  # requests per second, for kind="rate"
    arrivals: Literal["poisson", "constant"] = "poisson"
    replay_file: str | None = None  # JSONL or perf_analyzer input-data JSON, for kind="replay"

    def label(self) -> str:
        if self.kind == "concurrency":
            return f"concurrency={self.concurrency}"
        if self.kind == "rate":
            return f"rate={self.rate:g}/s ({self.arrivals})"
        return f"replay={self.replay_file}"


class Interval(BaseModel):
    """A point estimate with a bootstrap confidence interval."""

    value: float
    low: float
    high: float
    level: float = 0.95


class RatioGap(BaseModel):
    """Two independent estimates of one ratio (a selection estimate and its re-measure), compared on the
    log scale with each interval's half-width read as its level's normal quantile of standard errors."""

    relative: float  # first / second - 1
    z: float  # the log gap over the standard error of the difference
    agree: bool  # |z| within the two-sided 95% critical value: the intervals allow the gap
    # The two runs took turns through the same minutes, each on its own server (measure.remeasure_in_turns):
    # a gap beyond both widths is then not the machine's time. In R3 (2026-12-06, the ResNet CNN) the two
    # servers' median requests ran within 0-3% of each other, and the gain still differed by 10.6% (z -3.1):
    # 4 of the pair's 24 winner windows caught a slow cluster against 1 of the re-measure's.
    same_minutes: bool = False

    def describe(self) -> str:
        gap = f"the two runs differ by {100 * self.relative:+.1f}% (z {self.z:+.2f})"
        if self.agree:
            return f"{gap}, within what their intervals allow"
        if self.same_minutes:
            return (f"{gap}, more than their intervals allow, though they took turns through the same minutes: "
                    f"not the machine's time but their two servers' runs (how many of each one's requests caught "
                    f"a slow spell, which its windows sample thinly), so read both intervals, not one point")
        return (f"{gap}, more than their intervals allow: the gain moved between the runs (the machine's state, "
                f"not the sampling), so read both intervals, not one point")


def log_standard_error(interval: Interval) -> float:
    """The standard error of the log of an interval's value, its log half-width read as the level's normal
    quantile of standard errors (a ratio's intervals are near-symmetric on the log scale)."""
    return float(np.log(interval.high) - np.log(interval.low)) / (2.0 * float(stats.norm.ppf(0.5 + interval.level / 2.0)))


def log_gap(first: Interval, second: Interval) -> tuple[float, float]:
    """log(first / second) and its standard error from both widths, the two read as independent estimates
    (the se is 0 or not finite when neither has a width)."""
    se = float(np.hypot(log_standard_error(first), log_standard_error(second)))
    return float(np.log(first.value / second.value)), se


def ratio_gap(first: Interval, second: Interval, same_minutes: bool = False) -> RatioGap | None:
    """How far ``first`` is from ``second`` beyond what their widths allow; None when either has a bound at
    or below 0 (no log scale) or no width (nothing to compare against). ``same_minutes``: the two were
    measured in turns (:class:`RatioGap`)."""
    if min(first.value, first.low, second.value, second.low) <= 0:
        return None
    gap, se = log_gap(first, second)
    if not np.isfinite(se) or se <= 0:
        return None
    z = gap / se
    return RatioGap(relative=first.value / second.value - 1.0, z=z, agree=abs(z) <= float(stats.norm.ppf(0.975)),
                    same_minutes=same_minutes)


class ServerSpread(BaseModel):
    """One ratio measured on several fresh servers: each server's interval and how far they differ.

    A server's own interval counts the noise inside its run (windows, requests); a second server may add
    its own state (where its threads and memory landed, what the machine did meanwhile), which no window
    of the first can show. On a shared 2-core machine ten tunes of three servers each found none beyond
    the sampling (Q 16.0 on 20 df; benchmarks/gap_calibration.py)."""

    servers: list[Interval]  # each server's own ratio interval, in the order run
    between_sd: float  # the between-server sd of the log ratio (DerSimonian-Laird); 0 when within the noise
    q: float  # Cochran's Q: the servers' spread against their own intervals
    p_value: float  # Q against chi-square with k-1 degrees of freedom: small, they differ beyond their intervals

    def describe(self) -> str:
        each = ", ".join(f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]" for r in self.servers)
        test = f"Q {self.q:.2f} on {len(self.servers) - 1} df, p {self.p_value:.2g}"
        if self.between_sd > 0:
            spread = (f"they spread more than their own intervals account for ({test}): a between-server sd of "
                      f"{100 * self.between_sd:.1f}% in the log is added to the interval")
        else:
            spread = f"their spread is within their own intervals ({test})"
        return f"{len(self.servers)} servers: {each}; {spread}"


SLOW_FACTOR = 1.4  # a request is slow above this multiple of its window's median (the ResNet episodes: ~1.8x)
STEADY_WINDOWS = 0.8  # slow requests lifting at least this share of a side's windows are its steady tail, not episodes
# Below this share of the requests over the quantile right after another one, they come one at a time
# (conv_attention on two cores: 1-21%, each about one scheduler slice late); the ResNet CNN's came in runs of 14-24.
ISOLATED_RUNS = 0.3


class TailShape(BaseModel):
    """One side's tail around a quantile objective, over every request of its windows
    (gpt_triton/measure/tail_edge.py): the quantile, its neighbours, and how many requests were slow."""

    below: float  # ms at the quantile one tail-width below (p98 for a p99)
    at: float  # ms at the objective's quantile
    above: float  # ms half a tail-width above (p99.5 for a p99)
    slow_share: float  # fraction of requests slower than SLOW_FACTOR x their own window's median
    slow_windows: int  # windows holding more slow requests than the quantile's tail: their own quantile is a slow one
    windows: int
    # Share of the requests over the quantile (after a window's first) whose previous request was over it too:
    # near 0 for isolated stalls, near 1 for spells of a slow machine; None in reports written before it was kept.
    in_runs: float | None = None

    @property
    def spread(self) -> float:
        """above / below: near 1 in the body of a distribution, large where the quantile sits at an edge."""
        return self.above / self.below if self.below > 0 else float("inf")


class TailEdge(BaseModel):
    """Whether a quantile gain sits at the edge of a slow cluster, on either side of the pair."""

    metric: str  # the objective: p99 (or p90)
    neighbours: tuple[str, str]  # the quantiles either side, named: ("p98", "p99.5")
    baseline: TailShape
    winner: TailShape
    below_ratio: float  # baseline / winner at the lower neighbour
    above_ratio: float  # ... at the upper one
    edge_spread: float  # the spread at or above which a side is at an edge

    @property
    def spread(self) -> float:
        """The larger of the two sides' spreads: the edge is either side's."""
        return max(self.baseline.spread, self.winner.spread)

    @property
    def edge(self) -> bool:
        return self.spread >= self.edge_spread

    def describe(self) -> str:
        low, high = self.neighbours
        shapes = "; ".join(f"{side} {s.below:.3g} / {s.at:.3g} / {s.above:.3g} ms" for side, s in
                           (("baseline", self.baseline), ("winner", self.winner)))
        head = f"{low} / {self.metric} / {high}: {shapes} ({high}/{low} up to {self.spread:.2f})"
        if not self.edge:
            return f"{head}: the {self.metric} is in the body of both distributions"
        slow = " and ".join(f"{100 * s.slow_share:.2f}%" for s in (self.baseline, self.winner))
        lifted = " and ".join(f"{s.slow_windows} of {s.windows}" for s in (self.baseline, self.winner))
        # Slow requests in some windows and not others are episodes, whose share moves from run to run (the
        # ResNet CNN at night); in nearly every window they are a steady long tail (conv_attention at ~1.5 ms).
        sides = [s for s in (self.baseline, self.winner) if s.spread >= self.edge_spread]
        episodic = any(s.slow_windows < STEADY_WINDOWS * s.windows for s in sides)
        where = ("in some windows and not others: episodes, whose share moves between runs" if episodic else
                 "in nearly every window: a steady long tail, thin where the quantile falls")
        runs = [s.in_runs for s in sides if s.in_runs is not None]
        if runs and max(runs) < ISOLATED_RUNS:
            # What to do differs: a stall of one request is a thread waiting for a core (fewer threads, or
            # cores for the server alone, help); a spell is the machine's (another run, another hour).
            where += (f"; the requests over the {self.metric} come one at a time (at most {100 * max(runs):.0f}% "
                      "right after another): isolated stalls, as a thread waiting for a busy core makes, not spells "
                      "of a slow machine")
        elif runs:
            where += (f"; the requests over the {self.metric} come in runs ({100 * max(runs):.0f}% right after "
                      "another): spells in which request after request ran slow")
        return (f"{head}: the {self.metric} sits at the EDGE of a slow cluster. {slow} of the requests ran over "
                f"{SLOW_FACTOR:g}x their window's median, enough in {lifted} windows to lift that window's own "
                f"{self.metric} into it, {where}; a small change in that share moves the {self.metric} a lot, so "
                f"another run can differ by more than this interval says. The gain is {self.below_ratio:.3f} at {low} "
                f"and {self.above_ratio:.3f} at {high}")


def _log_scale(per_server: Sequence[Interval]) -> tuple[np.ndarray, np.ndarray]:
    """Each interval's log value and the variance of it that its width implies."""
    if not per_server:
        raise ValueError("between_servers needs at least one server's interval")
    if min(min(r.value, r.low) for r in per_server) <= 0:
        raise ValueError("between_servers needs positive ratios and bounds (they are pooled on the log scale)")
    # A zero-width interval (every window identical) would take all the weight: floor it far below any real one.
    return np.log([r.value for r in per_server]), np.maximum([log_standard_error(r) ** 2 for r in per_server], 1e-12)


def heterogeneity(per_server: Sequence[Interval]) -> tuple[float, float]:
    """Cochran's Q of the servers' log ratios about their inverse-variance mean, and DerSimonian-Laird's
    moment estimate of the between-server variance, unclipped (below 0 when they agree better than their
    widths say; averaged over many runs it estimates the variance better than one run's clipped one)."""
    return _q_and_moment(*_log_scale(per_server))


def _q_and_moment(y: np.ndarray, var: np.ndarray) -> tuple[float, float]:
    w = 1.0 / var
    q = float(np.sum(w * (y - np.sum(w * y) / np.sum(w)) ** 2))
    k = len(y)
    return q, ((q - (k - 1)) / float(np.sum(w) - np.sum(w**2) / np.sum(w)) if k > 1 else 0.0)


def between_servers(per_server: Sequence[Interval], level: float = 0.95) -> tuple[Interval, ServerSpread]:
    """Pool one ratio's intervals from independent servers: a random-effects mean on the log scale.

    Each server's log ratio has the standard error its interval implies (:func:`log_standard_error`); the
    between-server variance is DerSimonian-Laird's moment estimate (0 when the servers agree within their
    own noise), and every server is weighted by one over its own variance plus it. The interval is the
    normal one on that mean: with few servers the between-server variance is itself rough (two servers
    give it one degree of freedom), which is why :class:`ServerSpread` keeps each server's interval.
    Raises ValueError for no interval or a bound at or below 0 (a ratio has no log scale there)."""
    y, var = _log_scale(per_server)
    q, moment = _q_and_moment(y, var)
    k = len(per_server)
    tau2 = max(0.0, moment)
    w_random = 1.0 / (var + tau2)
    mean = float(np.sum(w_random * y) / np.sum(w_random))
    half = float(stats.norm.ppf(0.5 + level / 2.0)) / float(np.sqrt(np.sum(w_random)))
    pooled = Interval(value=float(np.exp(mean)), low=float(np.exp(mean - half)), high=float(np.exp(mean + half)),
                      level=level)
    p_value = float(stats.chi2.sf(q, k - 1)) if k > 1 else 1.0
    return pooled, ServerSpread(servers=list(per_server), between_sd=float(np.sqrt(tau2)), q=q, p_value=p_value)


class ServerBreakdown(BaseModel):
    """Mean per-request server-side times (ms) from Triton's statistics API deltas."""

    queue_ms: float = 0.0
    compute_input_ms: float = 0.0
    compute_infer_ms: float = 0.0
    compute_output_ms: float = 0.0
    success_count: int = 0
    execution_count: int = 0  # fewer than success_count when Triton batched requests
    metrics_delta: dict[str, float] | None = None  # nv_inference_* counter deltas from /metrics, if scraped


class WindowResult(BaseModel):
    duration_s: float
    requests: int
    errors: int
    throughput: float  # successful requests per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    server: ServerBreakdown | None = None
    rate_target: float | None = None  # open-loop: what was asked
    send_lag_p99_ms: float | None = None  # open-loop: scheduled vs actual send time
    rate_achieved: float | None = None  # open-loop: requests sent per second of the schedule's span
    rate_held: bool | None = None  # open-loop: achieved >= 98% of target, send lag p99 <= 20 ms, not growing
    foreign_cores: float | None = None  # cores other processes used meanwhile (gpt_triton/measure/machine_load.py)
    steal_cores: float | None = None  # cores the hypervisor took from this machine meanwhile
    # CPU ms this run's own processes (load generator, Triton, its stubs) spent per request meanwhile: the same
    # work costing more CPU is a slower machine, which neither of the two above shows (machine_load.py).
    own_cpu_ms: float | None = None
    set_aside: str | None = None  # why it was measured again instead of counted (gpt_triton/measure/crowding.py)


class LatencyStats(BaseModel):
    """A candidate at one load level, over its repeated windows."""

    load: LoadProfile
    windows: list[WindowResult] = Field(default_factory=list)
    stable: bool = False
    p50_ms: Interval | None = None
    p90_ms: Interval | None = None
    p99_ms: Interval | None = None
    mean_ms: Interval | None = None
    throughput: Interval | None = None
    errors: int = 0
    server: ServerBreakdown | None = None
    rate_held: bool | None = None  # open-loop: did the generator hold the requested rate
    requests: int = 0  # successful requests every latency estimate above rests on (pooled over windows)
    # Quantiles ("p99") too far in the tail for this many requests: no order statistic bounds them from
    # above, so their intervals are widened to the largest sample and selection refuses them.
    unbounded: list[str] = Field(default_factory=list)


class IsolatedStats(BaseModel):
    """In-process estimates, reported only for comparison with the served figures."""

    single_request_ms: float | None = None
    profiler_op_sum_ms: float | None = None


class ObjectiveContrasts(BaseModel):
    """The drift model of one interleaved run at the objective's load (log objective, lower is better):
    candidate effects and their covariance, so two candidates measured in that run are compared on
    their *difference*, where drift shared by both cancels, instead of by overlap of their marginal
    intervals (which each carry the whole drift and so call a 30% gap a tie on a noisy machine)."""

    ids: list[str]
    mu: list[float]
    cov: list[list[float]]  # covariance of mu (already scaled by the innovation variance)
    df: int
    aliases: dict[str, str] = Field(default_factory=dict)  # duplicate candidate -> the one measured

    def position(self, cid: str) -> int | None:
        """Where ``cid`` (or the candidate it duplicates) is in ``ids``; None when this run did not measure it."""
        measured = self.aliases.get(cid, cid)
        return self.ids.index(measured) if measured in self.ids else None

    def covers(self, a: str, b: str) -> bool:
        return self.position(a) is not None and self.position(b) is not None

    def contrast(self, a: str, b: str) -> tuple[float, float]:
        """log(objective a / objective b) and its standard error."""
        i, j = self.ids.index(self.aliases.get(a, a)), self.ids.index(self.aliases.get(b, b))
        if i == j:
            return 0.0, 0.0
        var = self.cov[i][i] + self.cov[j][j] - 2.0 * self.cov[i][j]
        return self.mu[i] - self.mu[j], float(np.sqrt(max(var, 0.0)))

    def tied(self, a: str, b: str, level: float) -> bool:
        """True when the two-sided ``level`` interval of the contrast contains 0."""
        diff, se = self.contrast(a, b)
        return abs(diff) <= float(stats.t.ppf(0.5 + level / 2.0, max(self.df, 1))) * se

    def effect(self, cid: str) -> float:
        """The candidate's effect: its log objective up to the run's offset (only differences mean anything)."""
        return self.mu[self.ids.index(self.aliases.get(cid, cid))]


def pooled_contrasts(records: Sequence[ObjectiveContrasts], ids: Sequence[str]) -> ObjectiveContrasts | None:
    """The effects of ``ids`` on the evidence of several independent interleaved runs at once.

    Generalised least squares over the runs' effect estimates (each weighted by the inverse of its own
    covariance), with one offset per run: a run's server, machine state and round effects shift all
    its candidates alike, so only its differences carry over. Two candidates are compared on every run
    that measured both (and through third candidates where a run measured only one of them). This is
    how a screen-then-select procedure's final choice uses both stages' data (Nelson et al. 2001, NSGS).
    The result's ``df`` is the smallest of the runs' (each run estimated its own noise). Ids that are
    one candidate in a run (its ``aliases``) are one effect here too. None when no run compared two of
    ``ids`` or the runs leave some difference undetermined."""
    reps: list[str] = []
    aliases: dict[str, str] = {}
    for cid in ids:
        same = next((rep for rep in reps for r in records
                     if r.covers(cid, rep) and r.position(cid) == r.position(rep)), None)
        if same is None:
            reps.append(cid)
        else:
            aliases[cid] = same
    column = {cid: k - 1 for k, cid in enumerate(reps) if k > 0}  # the first effect is the reference, 0
    used = []
    for r in records:
        rows = [(cid, i) for cid in reps if (i := r.position(cid)) is not None]
        if len(rows) >= 2:
            used.append((r, rows))
    if not used:
        return None
    params = len(reps) - 1 + len(used)
    xtwx, xtwy = np.zeros((params, params)), np.zeros(params)
    for k, (r, rows) in enumerate(used):
        index = [i for _, i in rows]
        x = np.zeros((len(rows), params))
        for row, (cid, _) in enumerate(rows):
            if cid in column:
                x[row, column[cid]] = 1.0
        x[:, len(reps) - 1 + k] = 1.0  # this run's offset
        weight = np.linalg.pinv(np.asarray(r.cov)[np.ix_(index, index)])
        xtwx += x.T @ weight @ x
        xtwy += x.T @ weight @ np.asarray(r.mu)[index]
    if np.linalg.matrix_rank(xtwx) < params:
        return None
    cov = np.linalg.inv(xtwx)
    beta = cov @ xtwy
    effects = len(reps) - 1
    full = np.zeros((len(reps), len(reps)))
    full[1:, 1:] = cov[:effects, :effects]
    return ObjectiveContrasts(ids=reps, mu=[0.0, *beta[:effects].tolist()], cov=full.tolist(),
                              df=min(r.df for r, _ in used), aliases=aliases)
