"""Pure comparisons of candidate outputs against reference outputs, per output and per request.

Metrics (per request; a request fails when any output exceeds a tolerance):
* ``abs_or_rel`` when both ``max_abs`` and ``max_rel`` are set: an element passes when it is within the
  absolute OR the relative tolerance (Polygraphy's rule; requiring both would reject any change to an
  element near zero). The value is the worst ``|c - r| / max(atol, rtol * (|r| + eps))``, tolerance 1.
* ``max_abs``, ``max_rel`` (epsilon ``rel_epsilon``), ``mean_abs``, ``rmse``: error metrics, lower is better.
* ``cosine`` (flattened request), ``iou`` (maps binarised at ``iou_threshold``): similarity, higher is better.
* ``top<k>``: for every sample of the batch, the reference's top-1 class is in the candidate's top-k;
  the value is the fraction of samples that agree, and a request passes only when all agree.
* ``task:<module:function>``: the user's ``fn(inputs, reference_outputs, candidate_outputs) -> (score, passed)``.

Margins are relative headroom in the passing direction: ``(tol - worst) / tol`` for error metrics and the
same on the distance ``1 - value`` for similarities (so 0.5 means "half the allowed error is used" for
both). Pass/fail metrics (top-k, task) have no continuous headroom: margin 1 when every request passes,
minus the failing fraction otherwise.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gpt_triton.accuracy.bounds import clopper_pearson_upper
from gpt_triton.core.accuracy import AccuracyResult, OutputResult
from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.objective import accuracy_eligible
from gpt_triton.core.spec import AccuracySpec, ToleranceSpec

Request = dict[str, np.ndarray]
TaskMetric = Callable[[Request, Request, Request], tuple[float, bool]]
QUANTILE = 0.99


# ---------------------------------------------------------------------------------------------- metrics


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def max_abs_error(ref: np.ndarray, cand: np.ndarray) -> float:
    return float(np.max(np.abs(_f64(cand) - _f64(ref)), initial=0.0))


def max_rel_error(ref: np.ndarray, cand: np.ndarray, epsilon: float = 1e-6) -> float:
    r = _f64(ref)
    return float(np.max(np.abs(_f64(cand) - r) / (np.abs(r) + epsilon), initial=0.0))


def abs_or_rel_error(ref: np.ndarray, cand: np.ndarray, atol: float, rtol: float, epsilon: float = 1e-6) -> float:
    """Worst element error in units of its allowance ``max(atol, rtol*(|r|+eps))``: <= 1 passes."""
    r = _f64(ref)
    allowance = np.maximum(atol, rtol * (np.abs(r) + epsilon))
    allowance = np.maximum(allowance, np.finfo(np.float64).tiny)  # atol = rtol = 0 means "exact"
    return float(np.max(np.abs(_f64(cand) - r) / allowance, initial=0.0))


def mean_abs_error(ref: np.ndarray, cand: np.ndarray) -> float:
    return float(np.mean(np.abs(_f64(cand) - _f64(ref)))) if ref.size else 0.0


def rmse(ref: np.ndarray, cand: np.ndarray) -> float:
    return float(np.sqrt(np.mean((_f64(cand) - _f64(ref)) ** 2))) if ref.size else 0.0


def cosine_similarity(ref: np.ndarray, cand: np.ndarray) -> float:
    r, c = _f64(ref).ravel(), _f64(cand).ravel()
    nr, nc = float(np.linalg.norm(r)), float(np.linalg.norm(c))
    if nr == 0.0 or nc == 0.0:
        return 1.0 if nr == nc else 0.0  # two zero vectors agree; zero against non-zero does not
    return float(np.dot(r, c) / (nr * nc))


def topk_agreement(ref: np.ndarray, cand: np.ndarray, k: int) -> float:
    """Fraction of samples (all axes but the last) whose reference top-1 is in the candidate's top-k."""
    classes = ref.shape[-1] if ref.ndim else 1
    r = _f64(ref).reshape(-1, classes)
    c = _f64(cand).reshape(-1, classes)
    if r.shape[0] == 0:
        return 1.0
    top1 = np.argmax(r, axis=1)
    k = min(k, classes)
    # The candidate's score of the reference class must beat all but k-1 other classes. Counting
    # strictly larger scores keeps ties in the candidate's favour, which argpartition would not.
    ref_class_score = c[np.arange(len(c)), top1]
    rank = np.sum(c > ref_class_score[:, None], axis=1)
    return float(np.mean(rank < k))


def iou(ref: np.ndarray, cand: np.ndarray, threshold: float = 0.5) -> float:
    """IoU of the maps binarised at ``threshold`` (value > threshold is foreground); empty vs empty is 1."""
    r, c = _f64(ref) > threshold, _f64(cand) > threshold
    union = int(np.count_nonzero(r | c))
    return 1.0 if union == 0 else int(np.count_nonzero(r & c)) / union


def load_task_metric(path: str) -> TaskMetric:
    """Import ``module:function``; every way this can go wrong is a one-line error."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise GptTritonError(f"task metric {path!r} must be module:function, e.g. mypkg.metrics:detections_agree")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raises while importing
        raise GptTritonError(f"task metric {path!r}: cannot import {module_name} ({type(exc).__name__}: {exc})") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise GptTritonError(f"task metric {path!r}: {module_name} has no function {attr}")
    return fn  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class _Check:
    metric: str
    kind: Literal["error", "similarity", "discrete"]
    tolerance: float
    fn: Callable[[np.ndarray, np.ndarray], float]

    def passes(self, value: float) -> bool:
        if self.kind == "error":
            return value <= self.tolerance
        return value >= self.tolerance


def _checks(tol: ToleranceSpec) -> list[_Check]:
    eps = tol.rel_epsilon
    out: list[_Check] = []
    if tol.max_abs is not None and tol.max_rel is not None:
        atol, rtol = tol.max_abs, tol.max_rel
        out.append(_Check("abs_or_rel", "error", 1.0, lambda r, c: abs_or_rel_error(r, c, atol, rtol, eps)))
    elif tol.max_abs is not None:
        out.append(_Check("max_abs", "error", tol.max_abs, max_abs_error))
    elif tol.max_rel is not None:
        out.append(_Check("max_rel", "error", tol.max_rel, lambda r, c: max_rel_error(r, c, eps)))
    if tol.mean_abs is not None:
        out.append(_Check("mean_abs", "error", tol.mean_abs, mean_abs_error))
    if tol.rmse is not None:
        out.append(_Check("rmse", "error", tol.rmse, rmse))
    if tol.cosine_min is not None:
        out.append(_Check("cosine", "similarity", tol.cosine_min, cosine_similarity))
    if tol.topk is not None:
        k = tol.topk
        out.append(_Check(f"top{k}", "discrete", 1.0, lambda r, c: topk_agreement(r, c, k)))
    if tol.iou_min is not None:
        threshold = 0.5 if tol.iou_threshold is None else tol.iou_threshold
        out.append(_Check("iou", "similarity", tol.iou_min, lambda r, c: iou(r, c, threshold)))
    return out


def _margin(kind: str, tolerance: float, worst: float, exceedances: int, requests: int) -> float:
    if kind == "discrete":
        return 1.0 if exceedances == 0 else -exceedances / requests
    if kind == "similarity":  # headroom on the distance 1 - similarity
        tolerance, worst = 1.0 - tolerance, 1.0 - worst
    if tolerance > 0:
        return (tolerance - worst) / tolerance
    return 1.0 if worst <= 0 else -1.0  # a zero tolerance: exact or not


def _summarise(output: str, check_metric: str, kind: str, tolerance: float, values: list[float], failed: list[bool]) -> OutputResult:
    arr = np.asarray(values, dtype=np.float64)
    lower_is_better = kind == "error"
    worst = float(arr.max() if lower_is_better else arr.min())
    quantile = float(np.quantile(arr, QUANTILE if lower_is_better else 1.0 - QUANTILE))
    exceedances = int(sum(failed))
    return OutputResult(
        output=output, metric=check_metric, tolerance=tolerance, worst=worst, quantile=quantile,
        margin=_margin(kind, tolerance, worst, exceedances, len(values)), exceedances=exceedances, requests=len(values),
    )


# ---------------------------------------------------------------------------------------------- compare


def compare_requests(
    reference: Sequence[Request],
    candidate: Sequence[Request],
    spec: AccuracySpec,
    split: Literal["tuning", "heldout"],
    inputs: Sequence[Request] | None = None,
    request_ids: Sequence[int] | None = None,
) -> AccuracyResult:
    """Compare request by request; the result carries per-output statistics and the Clopper-Pearson bound.

    ``request_ids``: each request's index in the user's reference file (a split's ``indices``), so messages
    name requests as the user numbers them; default: positions in ``reference``."""
    n = len(reference)
    ids = list(request_ids) if request_ids and len(request_ids) == n else list(range(n))
    if n == 0:
        raise GptTritonError("no reference requests to compare; give reference traffic with at least one request")
    names = list(reference[0])
    unknown = sorted(set(spec.outputs) - set(names))
    if unknown:
        raise GptTritonError(f"accuracy.outputs names unknown output {unknown[0]!r}; the model's outputs are: {', '.join(names)}")
    if len(candidate) != n:
        return _hard_failure(split, n, spec, f"candidate answered {len(candidate)} requests of {n}")
    problem = _structural_problem(reference, candidate, ids)
    if problem:
        return _hard_failure(split, n, spec, problem)

    request_failed = [False] * n
    results: list[OutputResult] = []
    worst_reason: tuple[float, str] | None = None
    for name in names:
        for check in _checks(spec.outputs.get(name, spec.default)):
            values = [check.fn(reference[i][name], candidate[i][name]) for i in range(n)]
            failed = [not check.passes(v) for v in values]
            result = _summarise(name, check.metric, check.kind, check.tolerance, values, failed)
            results.append(result)
            for i, bad in enumerate(failed):
                request_failed[i] |= bad
            if result.exceedances and (worst_reason is None or result.margin < worst_reason[0]):
                i = int(np.argmax(values) if check.kind == "error" else np.argmin(values))
                op = ">" if check.kind == "error" else "<"
                worst_reason = (result.margin, f"output {name} {check.metric} {values[i]:.4g} {op} {check.tolerance:.4g} in request {ids[i]}")
    if spec.task_metric:
        fn = load_task_metric(spec.task_metric)
        scores, failed = _run_task(fn, spec.task_metric, reference, candidate, inputs, ids)
        result = _summarise("*", f"task:{spec.task_metric}", "discrete", 0.0, scores, failed)
        results.append(result)
        for i, bad in enumerate(failed):
            request_failed[i] |= bad
        if result.exceedances and (worst_reason is None or result.margin < worst_reason[0]):
            worst_reason = (result.margin, f"task metric {spec.task_metric} failed request {ids[failed.index(True)]}")

    exceedances = sum(request_failed)
    passed = exceedances / n <= spec.max_exceedance_rate
    reason = None
    if exceedances:
        reason = f"{exceedances}/{n} requests exceed tolerances; worst: {worst_reason[1] if worst_reason else '?'}"
    return AccuracyResult(
        split=split, requests=n, passed=passed, exceedances=exceedances,
        exceedance_upper_bound=clopper_pearson_upper(exceedances, n, spec.confidence), confidence=spec.confidence,
        min_margin=min((r.margin for r in results), default=1.0), outputs=results, reason=reason,
    )


def _structural_problem(reference: Sequence[Request], candidate: Sequence[Request],
                        ids: Sequence[int] | None = None) -> str | None:
    """Missing outputs, shape/dtype mismatches and non-finite values: each fails the candidate outright."""
    for position, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        i = ids[position] if ids else position  # named as the user's file numbers it
        for name, r in ref.items():
            if name not in cand:
                return f"output {name} is missing from the answer to request {i}"
            c = cand[name]
            if c.shape != r.shape:
                return f"output {name} has shape {list(c.shape)} in request {i} but the reference has {list(r.shape)}"
            if c.dtype != r.dtype:
                return f"output {name} has dtype {c.dtype} in request {i} but the reference has {r.dtype}"
            if c.dtype.kind in "fc":
                if np.isnan(c).any():
                    return f"output {name} has NaN in request {i}"
                if np.isinf(c).any():
                    return f"output {name} has Inf in request {i}"
            if r.dtype.kind in "fc" and not np.isfinite(r).all():
                raise GptTritonError(
                    f"reference output {name} has NaN or Inf in request {i}; fix the reference data (or the default route)"
                )
    return None


def _run_task(
    fn: TaskMetric, path: str, reference: Sequence[Request], candidate: Sequence[Request], inputs: Sequence[Request] | None,
    ids: Sequence[int] | None = None,
) -> tuple[list[float], list[bool]]:
    scores: list[float] = []
    failed: list[bool] = []
    for i, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        try:
            score, ok = fn(inputs[i] if inputs is not None else {}, ref, cand)
            scores.append(float(score))
            failed.append(not bool(ok))
        except Exception as exc:  # the user's code: report it as their problem, in one line
            raise GptTritonError(
                f"task metric {path} failed on request {ids[i] if ids else i} ({type(exc).__name__}: {exc}); it must "
                "return (score, passed)"
            ) from exc
    return scores, failed


def _hard_failure(split: Literal["tuning", "heldout"], n: int, spec: AccuracySpec, reason: str) -> AccuracyResult:
    # Every request counts as failing: a candidate that emits NaN or wrong shapes is not partially right.
    return AccuracyResult(
        split=split, requests=n, passed=False, exceedances=n, exceedance_upper_bound=1.0,
        confidence=spec.confidence, min_margin=-1.0, outputs=[], reason=reason,
    )


eligible = accuracy_eligible  # the policy lives in gpt_triton.core.objective


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """Ids of (id, latency, error-or-bound) points no other point beats in both, by rising latency."""
    finite = [p for p in points if np.isfinite(p[1]) and np.isfinite(p[2])]
    front = [
        p for p in finite
        if not any(q[1] <= p[1] and q[2] <= p[2] and (q[1] < p[1] or q[2] < p[2]) for q in finite)
    ]
    return [p[0] for p in sorted(front, key=lambda p: (p[1], p[2]))]
