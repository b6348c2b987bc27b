"""The tuning spec: a YAML file validated by pydantic. Every field has a default, so no spec is needed.

Each stage owns one section; keep sections small and give every field a comment-worthy name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import LoadProfile

# How the pair's gain is formed from its windows (MeasureSpec.gain_statistic, gpt_triton/measure/paired.py).
GainStatistic = Literal["paired", "pooled"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KnobSpec(_Strict):
    """A knob either fixed (``value``) or swept (``values``)."""

    value: Any = None
    values: list[Any] | None = None


class FamilySpec(_Strict):
    enabled: bool = True
    # knob name -> fixed value, list of values, or {value: ...} / {values: [...]}
    knobs: dict[str, Any] = Field(default_factory=dict)

    def knob_specs(self) -> dict[str, KnobSpec]:
        out: dict[str, KnobSpec] = {}
        for name, raw in self.knobs.items():
            if isinstance(raw, dict):
                out[name] = KnobSpec.model_validate(raw)
            elif isinstance(raw, list):
                out[name] = KnobSpec(values=raw)
            else:
                out[name] = KnobSpec(value=raw)
        return out


class SearchSpec(_Strict):
    mode: Literal["fast", "full", "mixed", "random"] = "mixed"
    random_routes: Annotated[int, Field(ge=1)] = 16  # for mode=random
    seed: int = 0
    max_builds: Annotated[int, Field(ge=1)] = 64
    build_timeout_s: Annotated[float, Field(gt=0)] = 300.0
    build_memory_mb: Annotated[int, Field(ge=1)] = 8192


class MeasureSpec(_Strict):
    loads: list[LoadProfile] = Field(default_factory=lambda: [LoadProfile(kind="concurrency", concurrency=1)])
    warmup_s: Annotated[float, Field(ge=0)] = 1.0
    window_s: Annotated[float, Field(gt=0)] = 2.0
    window_min_requests: Annotated[int, Field(ge=1)] = 50
    min_windows: Annotated[int, Field(ge=1)] = 3
    max_windows: Annotated[int, Field(ge=1)] = 10
    stability: Annotated[float, Field(gt=0)] = 0.10  # last 3 windows within this fraction (perf_analyzer's rule)
    racing: bool = True
    remeasure_windows: Annotated[int, Field(ge=2)] = 8  # per candidate in the separate, interleaved A/B(/C) run
    confidence: Annotated[float, Field(gt=0, lt=1)] = 0.95
    bootstrap_resamples: Annotated[int, Field(ge=1)] = 2000
    client_processes: Annotated[int, Field(ge=1)] = 1  # load-generator processes, for open-loop rates one core cannot hold
    # The load client: the built-in gRPC generator, or NVIDIA's perf_analyzer binary (make setup fetches it;
    # GPT_TRITON_PERF_ANALYZER overrides where it is), so any figure can be cross-checked with it.
    client: Literal["builtin", "perf_analyzer"] = "builtin"
    # The other client (perf_analyzer beside the built-in one, or the reverse) measures the re-measure's pair
    # again on the re-measure's first server, its rounds in turns with the re-measure's: the two clients'
    # gains for the same two served models from the same minutes, and how far apart they are
    # (gpt_triton/measure/cross_check.py). Run after the tune, perf_analyzer's gain is minutes apart, and the
    # gain moves by about 10% between runs minutes apart on this machine. About doubles the re-measure's time.
    cross_check: Literal["none", "builtin", "perf_analyzer"] = "none"
    # The other client's windows, when not the re-measure's (window_s): 5 is perf_analyzer's -p default, whose
    # own printed p99 pools three such windows (benchmarks/perf_analyzer_as_run.py compares a tune with that).
    # On conv_attention the two clients' p99 gains differed one way at 0.75 s windows (the built-in's 1.17x
    # perf_analyzer's over nine tunes) and the other way at 5 s (0.90x in five runs; docs/measurement.md, "The
    # window's length turns it around"). Set, the cross-check measures the re-measure's pair alone (baseline
    # and winner), remeasure_windows rounds of windows this long, with no extension, each formed into the
    # tuner's statistic: about 2 x remeasure_windows of them. None: the re-measure's design and windows.
    cross_check_window_s: Annotated[float | None, Field(gt=0)] = None
    # How the load reaches Triton, as production's clients send it. http: the built-in client's concurrency-1
    # loop is a raw keep-alive socket with binary tensors (about a third of Python gRPC's client CPU per
    # request, less than perf_analyzer's; gpt_triton/measure/http_lean.py); perf_analyzer runs with -i http.
    protocol: Literal["grpc", "http"] = "grpc"
    # Requests beyond the objective's quantile each window holds (p99 with 5: 500 requests per window).
    tail_requests: Annotated[int, Field(ge=1)] = 5
    # Seconds at the start of every concurrency-1 window whose requests are sent but not counted: the model
    # measured just before (its spinning threads, its cache footprint) slows the next one for ~20-26 ms,
    # which is not the steady traffic production sees and lands in a p99 (docs/measurement.md).
    settle_s: Annotated[float, Field(ge=0)] = 0.05
    # Read Triton's /metrics before and after every window and keep its nv_inference_* counter deltas in
    # report.json (the statistics API already gives every window's counts and server times). Off: a
    # production Prometheus reads it every 15-30 s, not twice a window, and with latency summaries on,
    # reading it after every window went with a 12-21% higher p99 than a server without either
    # (benchmarks/summary_cost.py).
    scrape_metrics: bool = False
    # After racing, the tie group (or the top `finalists` by point estimate) plus the baseline are judged
    # again in one interleaved run of up to `finalist_windows` windows each (default: max_windows) before selection.
    finalists: Annotated[int, Field(ge=0)] = 3  # 0: no finalist stage
    finalist_windows: Annotated[int | None, Field(ge=3)] = None
    max_finalists: Annotated[int, Field(ge=2)] = 6
    # The finalist stage and the re-measure go on with the selected candidate and the baseline until their objective
    # ratio's 95% interval is within +/- gain_precision (relative), or each has gain_max_windows windows:
    # a gain is claimed at a known width (gpt_triton/measure/gain_precision.py). 0: no extension.
    gain_precision: Annotated[float, Field(ge=0, lt=1)] = 0.03
    gain_max_windows: Annotated[int, Field(ge=3)] = 24
    # How the pair's ratio (the finalist stage's estimate, the re-measured gain, the stop rule's width) is
    # formed from its windows. paired: the geometric mean over rounds of stat(baseline window) / stat(winner
    # window), two windows run side by side, with a t interval over the rounds; a slow spell of the machine
    # that one window catches is then one round, not the pooled p99's tail (gpt_triton/measure/paired.py).
    # pooled: stat(every baseline request) / stat(every winner request), with a two-stage bootstrap.
    gain_statistic: GainStatistic = "paired"
    # Fresh servers the re-measure runs on, one after another, each a whole re-measure (its windows, then the
    # pair to gain_precision * sqrt(servers), so that the pooled ratio is known to about gain_precision). One
    # server's interval cannot show what differs between servers (their state, the machine meanwhile); with
    # 2 or more the gain is pooled over them with that spread in its interval (core.measurements.between_servers),
    # at about that many times the re-measure's cost.
    remeasure_servers: Annotated[int, Field(ge=1, le=8)] = 1
    # The finalist pair's estimate and the re-measure on their fresh servers at the same time, taking turns a
    # round each (their burn-ins first), so that both see the same spells of the machine: run one after the
    # other, the gain of a conv_attention route moved by up to 17% between them with nothing else running,
    # and the estimate missed the re-measure by that (gpt_triton/measure/relay.py). Each keeps its own
    # server, seeds and windows. false: the pair's run, then the re-measure's.
    remeasure_in_turns: bool = True
    # Seconds of its own traffic each model gets, in windows alternating over the models loaded, on every fresh
    # server whose windows give the reported gain (the finalist stage's pair server, each re-measure server)
    # before its first counted window. In a fresh embedded server the selected conv_attention candidate ran
    # faster in its first half-minute or so of traffic than after it (the pair's p99 ratio 1.67 in the first
    # minute of alternating traffic, 1.3 after it), after an idle server too, and after traffic to the other
    # model alone: each model's own traffic settles it, so gains measured inside it overstated the steady
    # state (benchmarks/server_age.py). 0: none.
    burn_in_s: Annotated[float, Field(ge=0)] = 30.0
    # A counted window in which other processes used more CPU than usual is set aside and measured again (up to
    # five times in a row), up to this share of the counted windows (8 at least): two crowded windows of 24 can
    # hold a pooled p99 (gpt_triton/measure/crowding.py). On the embedded server only. 0: every window counted.
    repeat_crowded: Annotated[float, Field(ge=0, le=1)] = 0.25

    @model_validator(mode="after")
    def _window_counts(self) -> MeasureSpec:
        if self.max_windows < self.min_windows:
            raise ValueError(f"max_windows ({self.max_windows}) is below min_windows ({self.min_windows})")
        if self.cross_check == self.client:
            raise ValueError(f"cross_check ({self.cross_check}) is the load client itself: name the other one "
                             f"({'builtin' if self.client == 'perf_analyzer' else 'perf_analyzer'}) or none")
        return self


class ObjectiveSpec(_Strict):
    metric: Literal["p99", "p90", "p50", "mean", "throughput"] = "p99"
    load_index: Annotated[int, Field(ge=0)] = 0  # which of measure.loads the objective is read at
    slo_p99_ms: Annotated[float | None, Field(gt=0)] = None  # for metric=throughput: only candidates with p99 under it


class ToleranceSpec(_Strict):
    max_abs: Annotated[float | None, Field(ge=0)] = None
    max_rel: Annotated[float | None, Field(ge=0)] = None
    rel_epsilon: Annotated[float, Field(gt=0)] = 1e-6
    mean_abs: Annotated[float | None, Field(ge=0)] = None
    rmse: Annotated[float | None, Field(ge=0)] = None
    cosine_min: Annotated[float | None, Field(ge=-1, le=1)] = None
    topk: Annotated[int | None, Field(ge=1)] = None  # top-k agreement: the reference's top-1 must be in the candidate's top-k
    iou_threshold: float | None = None  # binarise maps at this value, then compare IoU
    iou_min: Annotated[float | None, Field(ge=0, le=1)] = None


class AccuracySpec(_Strict):
    default: ToleranceSpec = Field(default_factory=lambda: ToleranceSpec(max_abs=1e-3, max_rel=1e-2))
    outputs: dict[str, ToleranceSpec] = Field(default_factory=dict)
    task_metric: str | None = None  # "module:function"
    heldout_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.3
    split_seed: int = 0
    synthetic_requests: Annotated[int, Field(ge=2)] = 64  # when no --reference is given
    confidence: Annotated[float, Field(gt=0, lt=1)] = 0.95
    max_exceedance_rate: Annotated[float, Field(ge=0, le=1)] = 0.0  # per-request exceedance rate allowed on the tuning split
    min_margin: float = 0.0  # relative margin to the tolerance a candidate needs to be eligible
    max_exceedance_bound: Annotated[float | None, Field(gt=0, le=1)] = None  # eligible only when the Clopper-Pearson bound is below


# Reduced-precision routes the sensitivity search can lower group by group (family:precision).
PrecisionLowering = Literal["onnxruntime:int8_static", "onnxruntime:fp16", "openvino:int8", "tensorrt:fp16"]


def _default_lowerings() -> list[PrecisionLowering]:
    return ["onnxruntime:int8_static", "openvino:int8", "tensorrt:fp16", "onnxruntime:fp16"]


class PrecisionSpec(_Strict):
    """The per-layer-group precision search (gpt_triton.precision): after the route search's own plan, find
    on the tuning split which layer groups a reduced-precision route must keep in fp32, and propose each mix
    that holds the task tolerance as one more candidate."""

    enabled: bool = False
    lowerings: list[PrecisionLowering] = Field(default_factory=_default_lowerings)
    max_probes: int = Field(default=24, ge=1)  # in-process build + tuning-split run, over every lowering
    safety: float = Field(default=0.5, ge=0.0, le=1.0)  # a mix must pass with max_exceedance_rate * (1 - safety)
    reserve_s: float = Field(default=120.0, ge=0.0)  # stop probing when less of the time budget is left


class PromotionSpec(_Strict):
    repository: str = "model_repository"
    model_name: str | None = None  # default: the ONNX file's stem
    keep_versions: Annotated[int, Field(ge=1)] = 3  # tune prunes older versions, never the served (pinned) one nor the new one
    require_gain: bool = True  # promote the baseline unless the re-measured interval excludes 1.0


# The NGC Triton image production serves with: the chart's sidecar (gpt_triton.k8s.render.TRITON_IMAGE; a
# test keeps the two equal). core imports no stage, so the default is written here too.
DEFAULT_TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
_TENSORRT_VERSION = re.compile(r"^\d+\.\d+\.\d+(\.\d+)?$")


class ServerSpec(_Strict):
    triton_url: str | None = None  # HOST:PORT (gRPC) of an existing server; None starts an embedded one
    # Backends the server has besides python (the NGC image has onnxruntime, openvino, tensorrt).
    native_backends: list[str] | None = None  # None: embedded -> [], remote -> probe
    # The Triton image that serves the promoted model. A TensorRT plan runs only on the TensorRT that built
    # it: the tensorrt family is planned only when the builder's TensorRT is the one this image ships
    # (gpt_triton/data/tensorrt_support.json says which, for the images it has a source for).
    image: str = DEFAULT_TRITON_IMAGE
    # The TensorRT version ``image`` ships (major.minor.patch[.build]), for an image the table does not
    # list: read it in the image (dpkg -l | grep libnvinfer). None: from the table, or unknown.
    tensorrt_version: str | None = None

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("give the serving Triton image, e.g. nvcr.io/nvidia/tritonserver:24.10-py3")
        return value.strip()

    @field_validator("tensorrt_version")
    @classmethod
    def _tensorrt_version(cls, value: str | None) -> str | None:
        if value is not None and not _TENSORRT_VERSION.match(value.strip()):
            raise ValueError(f"{value!r} is not a TensorRT version: give major.minor.patch[.build], e.g. 10.5.0.18")
        return value.strip() if value is not None else None


class TuneSpec(_Strict):
    search: SearchSpec = Field(default_factory=SearchSpec)
    families: dict[str, FamilySpec] = Field(default_factory=dict)
    measure: MeasureSpec = Field(default_factory=MeasureSpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    accuracy: AccuracySpec = Field(default_factory=AccuracySpec)
    promotion: PromotionSpec = Field(default_factory=PromotionSpec)
    precision: PrecisionSpec = Field(default_factory=PrecisionSpec)
    server: ServerSpec = Field(default_factory=ServerSpec)
    time_budget_s: Annotated[float | None, Field(gt=0)] = None

    @field_validator("time_budget_s", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _cross_check_latency(self) -> TuneSpec:
        if self.measure.cross_check != "none" and self.objective.metric == "throughput":
            raise ValueError("measure.cross_check compares the two clients' latency gains: it needs a latency "
                             "objective (p99, p90, p50, mean), not throughput; set it to none")
        return self


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h`` -> seconds."""
    match = _DURATION.match(text)
    if not match:
        raise GptTritonError(f"bad duration {text!r}: use a number with s, m or h, e.g. 10m")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2) or "s"]
    return float(match.group(1)) * scale


def load_spec(path: str | Path | None) -> TuneSpec:
    """Read and validate a YAML spec; None gives the defaults. Errors are one line naming the field."""
    if path is None:
        return TuneSpec()
    path = Path(path)
    if not path.is_file():
        raise GptTritonError(f"spec file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise GptTritonError(f"spec {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise GptTritonError(f"spec {path} must be a YAML mapping at the top level")
    try:
        return TuneSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GptTritonError(f"spec {path}: {where}: {first['msg']}") from exc
