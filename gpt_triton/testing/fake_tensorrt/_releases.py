"""Which TensorRT releases the fake models, and what each one's Python surface holds.

Every fact here was read from NVIDIA/TensorRT (github.com/NVIDIA/TensorRT) at the tag and commit given in
:data:`RELEASES`: ``python/src/infer/pyCore.cpp`` (``py::enum_`` / ``py::class_`` bindings),
``python/src/infer/pyGraph.cpp`` (ITensor, ILayer), ``python/src/infer/pyFoundationalTypes.cpp``
(DataType, Dims), ``python/src/parsers/pyOnnx.cpp`` (OnnxParser) and the numeric enum values from
``include/NvInfer.h``, ``include/NvInferRuntime.h`` and ``include/NvInferRuntimeBase.h``; the full
version (with build number) from ``include/NvInferVersion.h``. Nothing of NVIDIA's code is copied: the
tables below are names and numbers.

Surface changes found between the tags read (only for the parts the fake models):

* 10.6: ``BuilderFlag.STRICT_NANS`` (24), ``MONITOR_MEMORY`` (25).
* 10.8: ``IBuilderConfig.tiling_optimization_level`` and ``l2_limit_for_tiling``, ``TilingOptimizationLevel``;
  ``BuilderFlag.EDITABLE_TIMING_CACHE`` (27), ``FP4`` (26); ``DataType.FP4``.
  (ANCHORS.md says "tiling_optimization_level from 10.13": the bindings have it from v10.8.0.)
* 10.9: ``NetworkDefinitionCreationFlag.PREFER_JIT_PYTHON_PLUGINS`` (2) / ``PREFER_AOT_PYTHON_PLUGINS`` (3).
* 10.12: ``BuilderFlag.DISTRIBUTIVE_INDEPENDENCE`` (28); ``DataType.E8M0``; the ILayer precision setters,
  ``set_output_type`` and the ``ITensor.dtype`` setter warn ``DeprecationWarning`` ("Superseded by strong typing").
* 10.16: ``ILayer.num_ranks``.
* 11.0: BuilderFlag loses FP16, BF16, INT8, FP8, FP4, INT4, OBEY/PREFER_PRECISION_CONSTRAINTS,
  REJECT_EMPTY_ALGORITHMS, WEIGHTLESS, and is RENUMBERED (VERSION_COMPATIBLE 13 -> 12, STRIP_PLAN 19 -> 18 ...);
  TacticSource keeps only EDGE_MASK_CONVOLUTIONS (0) and JIT_CONVOLUTIONS (1) (were 3 and 4);
  NetworkDefinitionCreationFlag loses EXPLICIT_BATCH and STRONGLY_TYPED becomes 0 ("always enabled");
  ``Builder.platform_has_tf32/fast_fp16/fast_int8`` are gone; ``ILayer.precision``, ``set_output_type`` and
  friends are gone; ``ITensor.dtype`` is read-only.
* 11.1: ``IBuilderConfig.build_route`` (read/write) and ``all_build_routes`` (read-only).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    key: str  # "10.13"
    tag: str  # git tag read
    commit: str  # commit of that tag
    version: str  # tensorrt.__version__ (NvInferVersion.h: major.minor.patch.build)

    @property
    def order(self) -> tuple[int, int]:
        major, minor = self.key.split(".")
        return int(major), int(minor)


RELEASES: dict[str, Release] = {
    r.key: r
    for r in (
        Release("10.5", "v10.5.0", "c8a50438f6929470800c22088480784b254a7ac0", "10.5.0.18"),
        Release("10.6", "v10.6.0", "c468d67760e066f4d85c3e7f2fa89aa221fac83f", "10.6.0.26"),
        Release("10.7", "v10.7.0", "17003e43da9858f574e3a4a1d795fcf218862fe3", "10.7.0.23"),
        Release("10.8", "v10.8.0", "64e56ab6cbe95c8220d80bc7ff10ccf61935759a", "10.8.0.43"),
        Release("10.9", "v10.9.0", "8c6d69ddec0b2feff12f55472dc5d55cb6861d53", "10.9.0.34"),
        Release("10.10", "v10.10.0", "665cfbe8623652e706ce7e616a3db42dbff94f5f", "10.10.0.31"),
        Release("10.11", "v10.11", "9255eb39e6642787828a4c1f7fc1d09fe004e7a2", "10.11.0.33"),
        Release("10.12", "v10.12.0", "6d178ce8c736c4397317b24205fb4333218e5c89", "10.12.0.36"),
        Release("10.13", "v10.13.3", "94e2b9ef6d2cce74c76cdad499cca36cc4949197", "10.13.3.9"),
        Release("10.14", "v10.14", "3b4ddc1d45f11167f2ea53dc6046bba8df800e2d", "10.14.1.48"),
        Release("10.15", "v10.15", "9973b2f4ab5c0d0055e9d36cd94a5692f8f8da1f", "10.15.1.29"),
        Release("10.16", "v10.16", "52399f555c2f80cb690a4a558b604e1a5f227e7c", "10.16.0.72"),
        Release("11.0", "v11.0", "771d8efdf7f9d7b1eeb0864eb05d4dd8a7755bb5", "11.0.0.114"),
        Release("11.1", "v11.1", "82d1dca801c8318a5605399d5240780d0679e4e1", "11.1.0.106"),
    )
}


def resolve(version: str) -> Release:
    """``"10.13"``, ``"10.13.3"`` or ``"10.13.3.9"`` -> the release read for that major.minor.

    A patch or build that differs from the one read is refused (ValueError): the fake does not invent releases.
    """
    parts = version.strip().split(".")
    key = ".".join(parts[:2])
    if key not in RELEASES:
        raise ValueError(f"fake TensorRT models {sorted(RELEASES, key=lambda k: RELEASES[k].order)}, not {version!r}")
    release = RELEASES[key]
    if parts[2:] and release.version.split(".")[: len(parts)] != parts:
        raise ValueError(f"the fake models {release.version} (tag {release.tag}) for {key}, not {version!r}")
    return release


def at_least(key: str, since: str) -> bool:
    return RELEASES[key].order >= RELEASES[since].order


# --- enums: name -> value, per release ------------------------------------------------------------

_BUILDER_FLAG_10 = {
    "FP16": 0, "INT8": 1, "DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6,
    "SPARSE_WEIGHTS": 7, "SAFETY_SCOPE": 8, "OBEY_PRECISION_CONSTRAINTS": 9, "PREFER_PRECISION_CONSTRAINTS": 10,
    "DIRECT_IO": 11, "REJECT_EMPTY_ALGORITHMS": 12, "VERSION_COMPATIBLE": 13, "EXCLUDE_LEAN_RUNTIME": 14,
    "FP8": 15, "ERROR_ON_TIMING_CACHE_MISS": 16, "BF16": 17, "DISABLE_COMPILATION_CACHE": 18, "WEIGHTLESS": 19,
    "STRIP_PLAN": 19, "REFIT_IDENTICAL": 20, "WEIGHT_STREAMING": 21, "INT4": 22, "REFIT_INDIVIDUAL": 23,
}
_BUILDER_FLAG_10_ADDED = {
    "STRICT_NANS": ("10.6", 24), "MONITOR_MEMORY": ("10.6", 25), "FP4": ("10.8", 26),
    "EDITABLE_TIMING_CACHE": ("10.8", 27), "DISTRIBUTIVE_INDEPENDENCE": ("10.12", 28),
}
_BUILDER_FLAG_11 = {
    "DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6, "SPARSE_WEIGHTS": 7,
    "SAFETY_SCOPE": 8, "DIRECT_IO": 11, "VERSION_COMPATIBLE": 12, "EXCLUDE_LEAN_RUNTIME": 13,
    "ERROR_ON_TIMING_CACHE_MISS": 15, "DISABLE_COMPILATION_CACHE": 17, "STRIP_PLAN": 18, "REFIT_IDENTICAL": 19,
    "WEIGHT_STREAMING": 20, "REFIT_INDIVIDUAL": 22, "STRICT_NANS": 23, "MONITOR_MEMORY": 24,
    "EDITABLE_TIMING_CACHE": 26, "DISTRIBUTIVE_INDEPENDENCE": 27,
}
_DATA_TYPE = {
    "FLOAT": 0, "HALF": 1, "BF16": 7, "INT8": 2, "INT32": 3, "INT64": 8, "BOOL": 4, "UINT8": 5, "FP8": 6, "INT4": 9,
}
# module-level aliases (pyFoundationalTypes.cpp: m.attr("float32") = DataType::kFLOAT ...)
DATA_TYPE_ALIASES = {
    "float32": "FLOAT", "float16": "HALF", "bfloat16": "BF16", "int8": "INT8", "int32": "INT32", "int64": "INT64",
    "bool": "BOOL", "uint8": "UINT8", "fp8": "FP8", "int4": "INT4", "fp4": "FP4", "e8m0": "E8M0",
}


def enum_members(name: str, key: str) -> dict[str, int] | None:
    """Members of enum ``name`` at release ``key``; None when the enum does not exist there."""
    eleven = at_least(key, "11.0")
    if name == "BuilderFlag":
        if eleven:
            return dict(_BUILDER_FLAG_11)
        flags = dict(_BUILDER_FLAG_10)
        flags.update({n: v for n, (since, v) in _BUILDER_FLAG_10_ADDED.items() if at_least(key, since)})
        return flags
    if name == "TacticSource":
        if eleven:
            return {"EDGE_MASK_CONVOLUTIONS": 0, "JIT_CONVOLUTIONS": 1}
        return {"CUBLAS": 0, "CUBLAS_LT": 1, "CUDNN": 2, "EDGE_MASK_CONVOLUTIONS": 3, "JIT_CONVOLUTIONS": 4}
    if name == "NetworkDefinitionCreationFlag":
        if eleven:
            return {"STRONGLY_TYPED": 0, "PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
        members = {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1}
        if at_least(key, "10.9"):
            members.update({"PREFER_JIT_PYTHON_PLUGINS": 2, "PREFER_AOT_PYTHON_PLUGINS": 3})
        return members
    if name == "MemoryPoolType":
        return {"WORKSPACE": 0, "DLA_MANAGED_SRAM": 1, "DLA_LOCAL_DRAM": 2, "DLA_GLOBAL_DRAM": 3,
                "TACTIC_DRAM": 4, "TACTIC_SHARED_MEMORY": 5}
    if name == "TilingOptimizationLevel":
        return {"NONE": 0, "FAST": 1, "MODERATE": 2, "FULL": 3} if at_least(key, "10.8") else None
    if name == "DataType":
        members = dict(_DATA_TYPE)
        if at_least(key, "10.8"):
            members["FP4"] = 10
        if at_least(key, "10.12"):
            members["E8M0"] = 11
        return members
    if name == "TensorIOMode":
        return {"NONE": 0, "INPUT": 1, "OUTPUT": 2}
    if name == "Severity":
        return {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 2, "INFO": 3, "VERBOSE": 4}
    if name == "ErrorCode":  # nvonnxparser::ErrorCode names from pyOnnx.cpp, numbered in binding order
        names = ["SUCCESS", "INTERNAL_ERROR", "MEM_ALLOC_FAILED", "MODEL_DESERIALIZE_FAILED", "INVALID_VALUE",
                 "INVALID_GRAPH", "INVALID_NODE", "UNSUPPORTED_GRAPH", "UNSUPPORTED_NODE", "UNSUPPORTED_NODE_ATTR",
                 "UNSUPPORTED_NODE_INPUT", "UNSUPPORTED_NODE_DATATYPE", "UNSUPPORTED_NODE_DYNAMIC",
                 "UNSUPPORTED_NODE_SHAPE", "REFIT_FAILED"]
        return {n: i for i, n in enumerate(names)}
    raise KeyError(name)


ENUM_NAMES = ("BuilderFlag", "TacticSource", "NetworkDefinitionCreationFlag", "MemoryPoolType",
              "TilingOptimizationLevel", "DataType", "TensorIOMode", "ErrorCode")

# Defaults (NvInfer.h / NvInferRuntime.h docs at the tags read): TF32 "Enabled by default"; tactic sources:
# CUBLAS/CUBLAS_LT/CUDNN "Disabled by default", EDGE_MASK_CONVOLUTIONS and JIT_CONVOLUTIONS "Enabled by default";
# builder_optimization_level 3 (0..5; above 5 behaves as 5); tiling NONE; max_num_tactics -1.
DEFAULT_FLAGS = ("TF32",)
DEFAULT_TACTIC_SOURCES = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")

# all_build_routes at 11.1: the two options NvInfer.h (v11.1, IBuilderConfig::getAllBuildRoutes) gives as its
# example, with its tuner_version. The real option list is the compiler's and is not public; pass your own.
EXAMPLE_TUNER_VERSION = "2.19.15"
EXAMPLE_TUNER_OPTIONS: tuple[dict[str, str], ...] = (
    {"option": "-conv_use_long_w", "allowed_values": "-conv_use_long_w=[on|off]", "default_value": "on",
     "help": "Convert Conv [N, C, X, 1] to [N, C, 1, X] in CASK params for perf."},
    {"option": "-kgen:codegen:cuda_tile", "allowed_values": "-kgen:codegen:cuda_tile=[0|1|2|3]",
     "default_value": "1",
     "help": "CUDA Tile codegen. 0: disable, 1: where profitable, 2: supported kdags, 3: force all."},
)
