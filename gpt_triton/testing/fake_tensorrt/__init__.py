"""A faithful, recording stand-in for NVIDIA's ``tensorrt`` Python module, one per TensorRT release.

TensorRT cannot be installed where gpt-triton's tests run (no GPU; PyPI's TensorRT is a stub that downloads
from NVIDIA's index). Code written against the REAL Python API is tested against this fake instead::

    from gpt_triton.testing import fake_tensorrt

    trt = fake_tensorrt.module("10.13")          # or "10.5" ... "10.16", "11.0", "11.1"
    with fake_tensorrt.installed("11.1") as trt:  # sys.modules["tensorrt"] is the fake inside the block
        import tensorrt                          # -> the fake
    fake_tensorrt.describe_engine(plan_bytes)    # what the fake builder recorded into a plan
    fake_tensorrt.state(trt).builds / .log       # every build header and every logged message

Faithful, not friendly: each module exposes, for the parts gpt-triton uses, the classes, enums, enum members
(with their real numeric values), properties and methods the real bindings expose at that release, and nothing
that release lacks (``trt.BuilderFlag.FP16`` on 11.x, ``trt.TacticSource.CUBLAS`` on 11.x, ``config.build_route``
before 11.1, ``config.tiling_optimization_level`` before 10.8 all raise AttributeError; the classes use
``__slots__`` so ASSIGNING an attribute a release lacks raises AttributeError too, as on pybind objects). Where the
real API returns None or False on failure the fake does too (the reason goes to the logger); where it raises
TypeError / RuntimeError / ValueError, so does the fake. The build records what was asked (flags, profiles,
levels, tactic sources, route, timing cache) into the plan; the 11.1 ``build_route`` setter silently keeps the
previous route when the tuner refuses one, exactly as the binding drops ``setBuildRoute``'s result.

Sources read (github.com/NVIDIA/TensorRT; files ``python/src/infer/pyCore.cpp``, ``python/src/infer/pyGraph.cpp``,
``python/src/infer/pyFoundationalTypes.cpp``, ``python/src/parsers/pyOnnx.cpp``, ``include/NvInfer.h``,
``include/NvInferRuntime.h``, ``include/NvInferRuntimeBase.h``, ``include/NvInferVersion.h``), per release:

=======  ==========  ========================================  ============
release  tag         commit                                    __version__
=======  ==========  ========================================  ============
10.5     v10.5.0     c8a50438f6929470800c22088480784b254a7ac0  10.5.0.18
10.6     v10.6.0     c468d67760e066f4d85c3e7f2fa89aa221fac83f  10.6.0.26
10.7     v10.7.0     17003e43da9858f574e3a4a1d795fcf218862fe3  10.7.0.23
10.8     v10.8.0     64e56ab6cbe95c8220d80bc7ff10ccf61935759a  10.8.0.43
10.9     v10.9.0     8c6d69ddec0b2feff12f55472dc5d55cb6861d53  10.9.0.34
10.10    v10.10.0    665cfbe8623652e706ce7e616a3db42dbff94f5f  10.10.0.31
10.11    v10.11      9255eb39e6642787828a4c1f7fc1d09fe004e7a2  10.11.0.33
10.12    v10.12.0    6d178ce8c736c4397317b24205fb4333218e5c89  10.12.0.36
10.13    v10.13.3    94e2b9ef6d2cce74c76cdad499cca36cc4949197  10.13.3.9
10.14    v10.14      3b4ddc1d45f11167f2ea53dc6046bba8df800e2d  10.14.1.48
10.15    v10.15      9973b2f4ab5c0d0055e9d36cd94a5692f8f8da1f  10.15.1.29
10.16    v10.16      52399f555c2f80cb690a4a558b604e1a5f227e7c  10.16.0.72
11.0     v11.0       771d8efdf7f9d7b1eeb0864eb05d4dd8a7755bb5  11.0.0.114
11.1     v11.1       82d1dca801c8318a5605399d5240780d0679e4e1  11.1.0.106
=======  ==========  ========================================  ============

What changed between them is listed in ``_releases``; each module file says what it follows and what it does
not model. In short, NOT modelled: any GPU work (``IExecutionContext.execute_async_v3``/``execute_v2`` exist and
raise NotImplementedError), kernel choice, timing, memory, DLA, plugins, refit, INT8 calibration, the real ONNX
parser's layer structure and operator coverage, graph building (``add_*``), shape tensors, version- or
hardware-compatible plans, and every binding gpt-triton does not use (absent from the fake, so a call to one
fails loudly rather than pretending). The fake GPU has compute capability 8.9 unless told otherwise.
The 11.1 tuner offers, by default, the two knobs NvInfer.h v11.1 gives as its example of ``getAllBuildRoutes``
(``-conv_use_long_w``, ``-kgen:codegen:cuda_tile``); the real knob list belongs to the compiler: pass
``tuner_options=`` to model another, or ``tuner=False`` for a build without the tuner (``all_build_routes == ""``).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpt_triton.testing.fake_tensorrt import _builder, _config, _network, _onnx, _runtime
from gpt_triton.testing.fake_tensorrt._releases import (
    DATA_TYPE_ALIASES,
    EXAMPLE_TUNER_OPTIONS,
    EXAMPLE_TUNER_VERSION,
    RELEASES,
    Release,
    at_least,
    resolve,
)
from gpt_triton.testing.fake_tensorrt._runtime import describe_engine
from gpt_triton.testing.fake_tensorrt._types import Context, Dims, FakeState, IHostMemory, make_loggers

__all__ = ["SUPPORTED_VERSIONS", "FakeState", "FakeTensorRT", "Release", "describe_engine", "installed", "module",
           "state"]

SUPPORTED_VERSIONS: tuple[str, ...] = tuple(RELEASES)


class FakeTensorRT(types.ModuleType):
    """The type of a fake ``tensorrt`` module (one release; see :func:`module`)."""


def module(version: str, *, compute_capability: tuple[int, int] = (8, 9), tuner: bool = True,
           tuner_options: list[dict[str, str]] | None = None, tuner_version: str | None = None) -> FakeTensorRT:
    """A new fake ``tensorrt`` module for ``version`` ("11.1", "10.13", "10.13.3", "10.13.3.9" ...).

    ``compute_capability`` is the fake GPU's (recorded in plans and timing caches; a plan from another one does
    not deserialize). ``tuner``/``tuner_options``/``tuner_version`` shape 11.1's ``all_build_routes``.
    """
    release = resolve(version)
    state = FakeState(release=release, compute_capability=tuple(compute_capability),  # type: ignore[arg-type]
                      tuner=tuner and at_least(release.key, "11.1"),
                      tuner_version=tuner_version or EXAMPLE_TUNER_VERSION,
                      tuner_options=[dict(o) for o in (tuner_options or EXAMPLE_TUNER_OPTIONS)])
    ctx = Context(state)
    mod = FakeTensorRT("tensorrt", f"Fake TensorRT {release.version} (gpt_triton.testing.fake_tensorrt; "
                                   f"from NVIDIA/TensorRT {release.tag} {release.commit})")
    mod.__version__ = release.version  # type: ignore[attr-defined]
    ilogger, logger = make_loggers(ctx)
    ctx.classes.update(ILogger=ilogger, Logger=logger)
    net_members = _network.version_members(ctx)
    for name, base, extra in (
        ("ITensor", _network.ITensorBase, net_members["ITensor"]),
        ("ILayer", _network.ILayerBase, net_members["ILayer"]),
        ("INetworkDefinition", _network.INetworkDefinitionBase, {}),
        ("OnnxParser", _onnx.OnnxParserBase, {}),
        ("ParserError", _onnx.ParserErrorBase, {}),
        ("IOptimizationProfile", _config.IOptimizationProfileBase, {}),
        ("ITimingCache", _config.ITimingCacheBase, {}),
        ("IBuilderConfig", _config.IBuilderConfigBase, _config.version_members(ctx)),
        ("Builder", _builder.BuilderBase, _builder.version_members(ctx)),
        ("Runtime", _runtime.RuntimeBase, {}),
        ("ICudaEngine", _runtime.ICudaEngineBase, {}),
        ("IExecutionContext", _runtime.IExecutionContextBase, {}),
    ):
        namespace: dict[str, Any] = {"__slots__": (), "_ctx": ctx, "__module__": "tensorrt",
                                     "__qualname__": name, **extra}
        ctx.classes[name] = type(name, (base,), namespace)
    for name, cls in ctx.classes.items():
        setattr(mod, name, cls)
    for name, enum_cls in ctx.enums.items():
        setattr(mod, name, enum_cls)
    datatype = ctx.enum("DataType")
    for alias, member in DATA_TYPE_ALIASES.items():
        if member in datatype.__members__:
            setattr(mod, alias, datatype[member])
    mod.Dims = Dims  # type: ignore[attr-defined]
    mod.IHostMemory = IHostMemory  # type: ignore[attr-defined]
    mod._fake_state = state  # type: ignore[attr-defined]  # private: not part of the real module
    return mod


def state(fake: types.ModuleType) -> FakeState:
    """What a fake module recorded: ``.builds`` (every plan header) and ``.log`` ((severity, message) pairs)."""
    recorded = getattr(fake, "_fake_state", None)
    if not isinstance(recorded, FakeState):
        raise TypeError(f"{fake!r} is not a fake TensorRT module")
    return recorded


_ABSENT = object()


@contextmanager
def installed(version: str, **options: Any) -> Iterator[FakeTensorRT]:
    """Put a fake module for ``version`` in ``sys.modules["tensorrt"]``; restore what was there afterwards."""
    fake = module(version, **options)
    previous = sys.modules.get("tensorrt", _ABSENT)
    sys.modules["tensorrt"] = fake
    try:
        yield fake
    finally:
        if previous is _ABSENT:
            sys.modules.pop("tensorrt", None)
        else:
            sys.modules["tensorrt"] = previous  # type: ignore[assignment]
