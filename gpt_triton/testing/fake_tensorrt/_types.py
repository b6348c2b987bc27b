"""Small value types shared by the fake: enums, Dims, IHostMemory, loggers, and the per-module context.

Behaviour taken from the bindings (NVIDIA/TensorRT, python/src/infer/pyFoundationalTypes.cpp and pyCore.cpp,
tags listed in ``_releases.RELEASES``):

* enums print as ``BuilderFlag.FP16`` and support ``int()`` (pybind ``py::enum_``, ``py::arithmetic``); a method
  taking an enum refuses a plain int or another module's enum with TypeError (pybind "incompatible function
  arguments"), which the fake reproduces;
* ``Dims`` compares equal to lists and tuples, has ``len``/indexing; a Python sequence longer than
  ``Dims.MAX_DIMS`` (8) or holding non-integers is not convertible (TypeError at the call);
* ``IHostMemory`` is what ``build_serialized_network`` / ``ITimingCache.serialize`` return: a buffer. The fake makes
  it a ``bytes`` subclass so ``bytes(x)``, ``memoryview(x)`` and ``file.write(x)`` work as on the real object;
* ``Logger(min_severity=Logger.WARNING)`` prints ``[MM/DD/YYYY-HH:MM:SS] [TRT] [W] message`` to stdout for
  messages at or above its severity (pyCore.cpp ``DefaultLogger``); ``ILogger`` can be subclassed with ``log``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

from gpt_triton.testing.fake_tensorrt._releases import ENUM_NAMES, Release, enum_members

MAX_DIMS = 8


class PyEnum(enum.IntEnum):
    """Base of the fake's enums: prints like a pybind11 enum (``BuilderFlag.FP16``)."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


def make_enum(name: str, members: dict[str, int]) -> type[PyEnum]:
    created: type[PyEnum] = PyEnum(name, list(members.items()))  # type: ignore[arg-type, assignment, call-arg]
    return created


def incompatible(func: str, *args: Any) -> TypeError:
    shown = ", ".join(repr(a) for a in args)
    return TypeError(f"{func}(): incompatible function arguments. Invoked with: {shown}")


def check_enum(value: Any, cls: type, func: str) -> None:
    if not isinstance(value, cls):
        raise incompatible(func, value)


def check_int(value: Any, func: str) -> int:
    if not isinstance(value, int):
        raise incompatible(func, value)
    return int(value)


def check_str(value: Any, func: str) -> str:
    if not isinstance(value, str):
        raise incompatible(func, value)
    return value


class Dims:
    """``tensorrt.Dims``: a shape; ``nbDims == -1`` is TensorRT's "invalid" (``len`` then raises ValueError)."""

    __slots__ = ("_d", "_nb")
    MAX_DIMS = MAX_DIMS

    def __init__(self, shape: Iterable[int] = ()) -> None:
        values = tuple(shape)
        if len(values) > MAX_DIMS:
            raise ValueError(f"Input length {len(values)}. Max expected length is {MAX_DIMS}")
        self._d = tuple(int(v) for v in values)
        self._nb = len(self._d)

    @classmethod
    def invalid(cls) -> Dims:
        dims = cls(())
        dims._nb = -1
        return dims

    def __len__(self) -> int:
        return self._nb  # -1 -> Python raises ValueError, as it does for the real invalid Dims

    def __getitem__(self, index: SupportsIndex | slice) -> Any:
        if isinstance(index, slice):
            return self._d[index]
        i = int(index)
        if not -len(self._d) <= i < len(self._d):
            raise IndexError(index)
        return self._d[i]

    def __iter__(self) -> Any:
        return iter(self._d)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Dims):
            return self._nb == other._nb and self._d == other._d
        if isinstance(other, (list, tuple)):
            return self._nb == len(other) and list(self._d) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._nb, self._d))

    def __repr__(self) -> str:
        if self._nb == 1:
            return f"({self._d[0]},)"
        return "(" + ", ".join(str(d) for d in self._d) + ")"

    __str__ = __repr__


def to_dims(value: Any, func: str) -> tuple[int, ...]:
    """Convert an argument the way pybind converts to ``Dims`` (Dims, or a sequence of at most 8 ints)."""
    if isinstance(value, Dims):
        if len(value._d) != value._nb:
            raise incompatible(func, value)
        return value._d
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise incompatible(func, value)
    if len(value) > MAX_DIMS or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise incompatible(func, value)
    return tuple(int(v) for v in value)


class IHostMemory(bytes):
    """``tensorrt.IHostMemory``: a host buffer (here immutable bytes) with ``nbytes`` (``dtype`` is not modelled)."""

    @property
    def nbytes(self) -> int:
        return len(self)


def as_buffer(value: Any, func: str) -> bytes:
    if isinstance(value, str):
        raise incompatible(func, value)
    try:
        return bytes(memoryview(value))
    except TypeError:
        raise incompatible(func, value) from None


_LETTER = {0: "F", 1: "E", 2: "W", 3: "I", 4: "V"}


@dataclass
class FakeState:
    """What a fake module saw: every logged message and every build asked of it (see ``fake_tensorrt.state``)."""

    release: Release
    compute_capability: tuple[int, int]
    tuner: bool
    tuner_version: str
    tuner_options: list[dict[str, str]]
    log: list[tuple[str, str]] = field(default_factory=list)  # (severity name, message)
    builds: list[dict[str, Any]] = field(default_factory=list)  # header of every engine built


class Context:
    """Everything the classes of ONE fake module share: its release, its enum classes and its state."""

    def __init__(self, state: FakeState) -> None:
        self.state = state
        self.key = state.release.key
        self.enums: dict[str, type[PyEnum]] = {}
        for name in ENUM_NAMES:
            members = enum_members(name, self.key)
            if members is not None:
                self.enums[name] = make_enum(name, members)
        self.severity = make_enum("Severity", enum_members("Severity", self.key) or {})
        self.classes: dict[str, Any] = {}

    def enum(self, name: str) -> type[PyEnum]:
        return self.enums[name]

    def member(self, enum_name: str, member: str) -> PyEnum:
        cls = self.enums[enum_name]
        return cls[member]

    def emit(self, logger: Any, level: str, message: str) -> None:
        """Log through the user's logger, as the library does, and keep a copy in the state."""
        self.state.log.append((level, message))
        if logger is not None:
            logger.log(self.severity[level], message)


def make_loggers(ctx: Context) -> tuple[type, type]:
    severity = ctx.severity

    class ILogger:
        """Subclass and define ``log(severity, msg)``; TensorRT calls it for every message."""

        __slots__ = ()
        Severity = severity

        def log(self, severity: Any, msg: str) -> None:
            raise RuntimeError('Tried to call pure virtual function "ILogger::log"')

    for member in severity:  # export_values(): trt.ILogger.WARNING, trt.Logger.WARNING
        setattr(ILogger, member.name, member)

    class Logger(ILogger):
        """``tensorrt.Logger``: prints messages at or above ``min_severity`` to stdout."""

        __slots__ = ("min_severity",)

        def __init__(self, min_severity: Any = severity["WARNING"]) -> None:
            check_enum(min_severity, severity, "__init__")
            self.min_severity = min_severity

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) > int(self.min_severity):  # INFO is larger than WARNING: inverted comparison
                return
            stamp = time.strftime("%m/%d/%Y-%H:%M:%S")
            print(f"[{stamp}] [TRT] [{_LETTER[int(severity)]}] {msg}")

    return ILogger, Logger
