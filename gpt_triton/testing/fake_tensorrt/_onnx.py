"""The ONNX side of the fake: reading a model with ``onnx``, ``OnnxParser`` and ``ParserError``.

Bindings followed: python/src/parsers/pyOnnx.cpp at the tags in ``_releases.RELEASES``: ``OnnxParser(network,
logger)``, ``parse(model, path=None)`` and ``parse_from_file(model)`` returning bool, ``num_errors``,
``get_error(index)`` (None out of range), ``clear_errors()``; ``ParserError`` with ``code()``, ``desc()``,
``file()``, ``line()``, ``func()``, ``node()``, ``node_name()``, ``node_operator()`` and the ``__str__`` format of
``parserErrorStr`` ("In node N with name: X and operator: Y (func): CODE: desc", without the node part for
MODEL_DESERIALIZE_FAILED and REFIT_FAILED). ``ErrorCode`` names come from the binding; their numbers follow the
binding's order (the nvonnxparser header, a git submodule, was not read).

The model is read for real (``onnx.load`` / ``onnx.load_from_string``; no ``onnx.checker``, which the real
parser does not run either): inputs (ONNX initializers excluded), outputs, element types and dims
(``dim_param`` or a missing dim -> -1), and one layer per node, typed through ``onnx.shape_inference`` (FLOAT
where inference gives nothing). A model that does not load, or has no graph or opset, is
MODEL_DESERIALIZE_FAILED; an input/output element type with no TensorRT DataType at that release
(e.g. DOUBLE) is reported as UNSUPPORTED_GRAPH - an approximation of the real parser. External weights are not
read; operator coverage is not modelled (every op is accepted).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from gpt_triton.testing.fake_tensorrt._types import Context, as_buffer, check_str

_ONNX_TO_TRT = {1: "FLOAT", 2: "UINT8", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 10: "HALF", 16: "BF16",
                17: "FP8", 22: "INT4", 23: "FP4"}


class ParseFailure(Exception):
    def __init__(self, code: str, desc: str, node: int = -1, node_name: str = "", op: str = "") -> None:
        super().__init__(desc)
        self.code, self.desc, self.node, self.node_name, self.op = code, desc, node, node_name, op


@dataclass
class _Value:
    dtype: str
    shape: tuple[int, ...] | None


def _dims(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)


def _dtype(elem: int, ctx: Context, where: str) -> str:
    name = _ONNX_TO_TRT.get(elem)
    if name is None or name not in ctx.enum("DataType").__members__:
        raise ParseFailure("UNSUPPORTED_GRAPH", f"{where}: ONNX element type {elem} has no TensorRT DataType here")
    return name


def read_graph(model: onnx.ModelProto, ctx: Context) -> dict[str, Any]:
    """Inputs, outputs, nodes and value types of an ONNX model, in TensorRT terms."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shape inference is a help, not a requirement
        inferred = model
    graph = inferred.graph
    values: dict[str, _Value] = {}
    for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
        elem = vi.type.tensor_type.elem_type
        values[vi.name] = _Value(_ONNX_TO_TRT.get(elem, "FLOAT"), _dims(vi.type))
    for init in graph.initializer:
        values[init.name] = _Value(_ONNX_TO_TRT.get(init.data_type, "FLOAT"), tuple(init.dims))
    initializers = {i.name for i in graph.initializer}
    inputs = [(vi.name, _dtype(vi.type.tensor_type.elem_type, ctx, vi.name), _dims(vi.type) or ())
              for vi in graph.input if vi.name not in initializers]
    outputs = [(vi.name, _dtype(vi.type.tensor_type.elem_type, ctx, vi.name), _dims(vi.type) or ())
               for vi in graph.output]
    nodes = [(n.name or f"{n.op_type}_{i}", n.op_type, list(n.input), list(n.output)) for i, n in enumerate(graph.node)]
    return {"inputs": inputs, "outputs": outputs, "nodes": nodes, "values": values}


class ParserErrorBase:
    __slots__ = ("_code", "_desc", "_func", "_node", "_node_name", "_op")
    _ctx: Context

    def __init__(self, code: Any, desc: str, func: str, node: int, node_name: str, op: str) -> None:
        self._code, self._desc, self._func, self._node, self._node_name, self._op = code, desc, func, node, node_name, op

    def code(self) -> Any:
        return self._code

    def desc(self) -> str:
        return self._desc

    def file(self) -> str:
        return ""

    def line(self) -> int:
        return 0

    def func(self) -> str:
        return self._func

    def node(self) -> int:
        return self._node

    def node_name(self) -> str:
        return self._node_name

    def node_operator(self) -> str:
        return self._op

    def __str__(self) -> str:  # pyOnnx.cpp parserErrorStr
        info = f"({self._func}): {self._code.name}: {self._desc}"
        if self._code.name in ("MODEL_DESERIALIZE_FAILED", "REFIT_FAILED"):
            return info
        return f"In node {self._node} with name: {self._node_name} and operator: {self._op} {info}"

    __repr__ = __str__


class OnnxParserBase:
    __slots__ = ("_network", "_logger", "_errors")
    _ctx: Context

    def __init__(self, network: Any, logger: Any) -> None:
        if not isinstance(network, self._ctx.classes["INetworkDefinition"]):
            raise TypeError(f"__init__(): incompatible constructor arguments. Invoked with: {network!r}, {logger!r}")
        self._network, self._logger = network, logger
        self._errors: list[Any] = []

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, index: int) -> Any:
        return self._errors[index] if 0 <= index < len(self._errors) else None

    def clear_errors(self) -> None:
        self._errors = []

    def parse(self, model: Any, path: str | None = None) -> bool:
        data = as_buffer(model, "parse")
        return self._load(lambda: onnx.load_from_string(data), "parse")

    def parse_from_file(self, model: str) -> bool:
        path = check_str(model, "parse_from_file")
        return self._load(lambda: onnx.load(path, load_external_data=False), "parseFromFile",
                          missing=not Path(path).is_file())

    def _load(self, loader: Any, func: str, missing: bool = False) -> bool:
        error_cls = self._ctx.classes["ParserError"]
        codes = self._ctx.enum("ErrorCode")
        try:
            if missing:
                raise ParseFailure("MODEL_DESERIALIZE_FAILED", "Failed to parse ONNX model from file")
            try:
                proto = loader()
            except Exception as exc:
                raise ParseFailure("MODEL_DESERIALIZE_FAILED", f"Failed to parse the ONNX model: {exc}") from exc
            if not proto.HasField("graph") or not proto.opset_import:
                raise ParseFailure("MODEL_DESERIALIZE_FAILED", "Failed to parse the ONNX model: no graph or opset")
            if self._network._layers or self._network._inputs:
                raise ParseFailure("INVALID_GRAPH", "the network already holds a parsed model")
            graph = read_graph(proto, self._ctx)
        except ParseFailure as failure:
            self._errors.append(error_cls(codes[failure.code], failure.desc, func, failure.node, failure.node_name,
                                          failure.op))
            self._ctx.emit(self._logger, "ERROR", str(self._errors[-1]))
            return False
        self._network.populate(graph)
        return True
