"""INetworkDefinition, ITensor, ILayer and the OnnxParser, over a model read for real with ``onnx``.

Bindings followed: python/src/infer/pyGraph.cpp (ITensor, ILayer, INetworkDefinition) and
python/src/parsers/pyOnnx.cpp (OnnxParser, ParserError) at the tags in ``_releases.RELEASES``.

Modelled: network inputs/outputs with their ONNX names, element types and dims (``dim_param`` or a missing
dim -> -1, i.e. dynamic); ONNX initializers are not inputs; one ILayer per ONNX node (named after the node,
or ``<op>_<index>``), whose inputs/outputs are ITensors typed from ONNX shape inference (FLOAT when unknown);
per-layer precision and output types on 10.x (``precision``, ``set_output_type`` ..., deprecated with a
DeprecationWarning from 10.12, gone in 11.0); ``ITensor.dtype`` settable on 10.x, read-only on 11.x.
A strongly-typed network (``1 << STRONGLY_TYPED`` on 10.x, always on 11.x) rejects precision and output-type
calls (NvInfer.h: "Strongly-typed networks reject calls to method setPrecision / setOutputType"): the fake
logs an error and changes nothing.

NOT modelled: the real parser's layer structure (it creates several layers per node, constants become
IConstantLayer ...), so ``num_layers`` is the ONNX node count; ``ILayer.type``/``LayerType``; operator coverage
(every ONNX op is accepted); plugins; ``add_*`` graph building; shape tensors; external weights (not read).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from gpt_triton.testing.fake_tensorrt._releases import at_least
from gpt_triton.testing.fake_tensorrt._types import Context, Dims, as_buffer, check_enum, check_str, to_dims

_ONNX_TO_TRT = {1: "FLOAT", 2: "UINT8", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 10: "HALF", 16: "BF16",
                17: "FP8", 22: "INT4", 23: "FP4"}
_DEPRECATED = "Deprecated in TensorRT 10.12. Superseded by strong typing."


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


class ITensorBase:
    __slots__ = ("_net", "_name", "_shape", "_dtype", "_input", "_output")
    _ctx: Context

    def __init__(self, net: Any, name: str, dtype: Any, shape: tuple[int, ...], is_input: bool, is_output: bool):
        self._net, self._name, self._dtype, self._shape = net, name, dtype, shape
        self._input, self._output = is_input, is_output

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = check_str(value, "name")

    @property
    def shape(self) -> Dims:
        return Dims(self._shape)

    @shape.setter
    def shape(self, value: Any) -> None:
        self._shape = to_dims(value, "shape")

    @property
    def is_network_input(self) -> bool:
        return self._input

    @property
    def is_network_output(self) -> bool:
        return self._output

    @property
    def is_shape_tensor(self) -> bool:
        return False

    @property
    def is_execution_tensor(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<ITensor {self._name!r} {self._dtype} {Dims(self._shape)}>"


def _dtype_get(self: Any) -> Any:
    return self._dtype


def _dtype_set(self: Any, value: Any) -> None:
    if at_least(self._ctx.key, "10.12"):
        warnings.warn(f"Use {_DEPRECATED} instead.", DeprecationWarning, stacklevel=2)
    check_enum(value, self._ctx.enum("DataType"), "dtype")
    if self._net._strongly_typed and not self._input:
        self._ctx.emit(self._net._logger, "ERROR", f"ITensor::setType: {self._name} is not a network input of "
                       "a strongly typed network")
        return
    self._dtype = value


class ILayerBase:
    __slots__ = ("_net", "_name", "_op", "_inputs", "_outputs", "_precision", "_output_types", "_metadata")
    _ctx: Context

    def __init__(self, net: Any, name: str, op: str, inputs: list[Any], outputs: list[Any]) -> None:
        self._net, self._name, self._op, self._inputs, self._outputs = net, name, op, inputs, outputs
        self._precision: Any = None
        self._output_types: dict[int, Any] = {}
        self._metadata = ""

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = check_str(value, "name")

    @property
    def metadata(self) -> str:
        return self._metadata

    @metadata.setter
    def metadata(self, value: str) -> None:
        self._metadata = check_str(value, "metadata")

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_input(self, index: int) -> Any:
        return self._inputs[index] if 0 <= index < len(self._inputs) else None

    def get_output(self, index: int) -> Any:
        return self._outputs[index] if 0 <= index < len(self._outputs) else None

    def get_output_type(self, index: int) -> Any:
        if index in self._output_types:
            return self._output_types[index]
        out = self.get_output(index)
        return out._dtype if out is not None else self._ctx.member("DataType", "FLOAT")

    def describe(self) -> dict[str, Any]:
        return {"name": self._name, "op": self._op,
                "precision": self._precision.name if self._precision is not None else None,
                "output_types": {str(i): t.name for i, t in sorted(self._output_types.items())}}


def _warn_deprecated(layer: Any) -> None:
    if at_least(layer._ctx.key, "10.12"):
        warnings.warn(f"Use {_DEPRECATED} instead.", DeprecationWarning, stacklevel=3)


def _rejected_if_strong(layer: Any, what: str) -> bool:
    if layer._net._strongly_typed:
        layer._ctx.emit(layer._net._logger, "ERROR", f"ILayer::{what}: strongly typed networks reject this call "
                        f"(layer {layer._name})")
        return True
    return False


def _precision_get(self: Any) -> Any:
    return self._precision if self._precision is not None else self._ctx.member("DataType", "FLOAT")


def _precision_set(self: Any, value: Any) -> None:
    _warn_deprecated(self)
    check_enum(value, self._ctx.enum("DataType"), "precision")
    if not _rejected_if_strong(self, "setPrecision"):
        self._precision = value


def _precision_is_set(self: Any) -> bool:
    _warn_deprecated(self)
    return self._precision is not None


def _reset_precision(self: Any) -> None:
    _warn_deprecated(self)
    self._precision = None


def _set_output_type(self: Any, index: int, dtype: Any) -> None:
    _warn_deprecated(self)
    check_enum(dtype, self._ctx.enum("DataType"), "set_output_type")
    if _rejected_if_strong(self, "setOutputType"):
        return
    if not 0 <= index < len(self._outputs):
        self._ctx.emit(self._net._logger, "ERROR", f"ILayer::setOutputType: index {index} out of range")
        return
    self._output_types[index] = dtype


def _output_type_is_set(self: Any, index: int) -> bool:
    _warn_deprecated(self)
    return index in self._output_types


def _reset_output_type(self: Any, index: int) -> None:
    _warn_deprecated(self)
    self._output_types.pop(index, None)


def _num_ranks_get(self: Any) -> int:
    return 1


def _num_ranks_set(self: Any, value: int) -> None:
    if value != 1:
        raise RuntimeError("Failed to set num_ranks. Only IDistCollectiveLayer supports num_ranks > 1 via ILayer.")


class INetworkDefinitionBase:
    __slots__ = ("_builder", "_flags", "_strongly_typed", "_inputs", "_outputs", "_layers", "_name", "_logger")
    _ctx: Context

    def __init__(self, builder: Any, flags: int, strongly_typed: bool) -> None:
        self._builder, self._flags, self._strongly_typed = builder, flags, strongly_typed
        self._inputs: list[Any] = []
        self._outputs: list[Any] = []
        self._layers: list[Any] = []
        self._name = "Unnamed Network 0"
        self._logger = builder._logger

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = check_str(value, "name")

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    @property
    def flags(self) -> int:
        return self._flags

    @property
    def has_implicit_batch_dimension(self) -> bool:
        return False

    @property
    def builder(self) -> Any:
        return self._builder

    def get_flag(self, flag: Any) -> bool:
        check_enum(flag, self._ctx.enum("NetworkDefinitionCreationFlag"), "get_flag")
        return bool(self._flags & (1 << int(flag)))

    def get_input(self, index: int) -> Any:
        return self._inputs[index] if 0 <= index < len(self._inputs) else None

    def get_output(self, index: int) -> Any:
        return self._outputs[index] if 0 <= index < len(self._outputs) else None

    def get_layer(self, index: int) -> Any:
        return self._layers[index] if 0 <= index < len(self._layers) else None

    def __len__(self) -> int:
        return len(self._layers)

    def __getitem__(self, index: int) -> Any:
        if not -len(self._layers) <= index < len(self._layers):
            raise IndexError(index)
        return self._layers[index]

    def populate(self, graph: dict[str, Any]) -> None:
        datatype = self._ctx.enum("DataType")
        tensor_cls, layer_cls = self._ctx.classes["ITensor"], self._ctx.classes["ILayer"]
        out_names = {name for name, _, _ in graph["outputs"]}
        tensors: dict[str, Any] = {}
        for name, dtype, shape in graph["inputs"]:
            tensors[name] = tensor_cls(self, name, datatype[dtype], shape, True, name in out_names)
            self._inputs.append(tensors[name])

        def tensor(name: str) -> Any:
            if name not in tensors:
                value = graph["values"].get(name)
                dtype, shape = (value.dtype, value.shape or ()) if value else ("FLOAT", ())
                tensors[name] = tensor_cls(self, name, datatype[dtype], shape, False, name in out_names)
            return tensors[name]

        for name, op, ins, outs in graph["nodes"]:
            self._layers.append(layer_cls(self, name, op, [tensor(i) for i in ins if i], [tensor(o) for o in outs]))
        for name, dtype, shape in graph["outputs"]:
            out = tensor(name)
            out._dtype, out._shape = datatype[dtype], shape
            self._outputs.append(out)


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
        self._network, self._logger, self._errors = network, logger, []

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
                onnx.checker.check_model(proto)
            except ParseFailure:
                raise
            except Exception as exc:
                raise ParseFailure("MODEL_DESERIALIZE_FAILED", f"Failed to parse the ONNX model: {exc}") from exc
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


def version_members(ctx: Context) -> dict[str, dict[str, Any]]:
    """Members that exist only at some releases, keyed by class."""
    layer: dict[str, Any] = {}
    tensor: dict[str, Any] = {}
    if at_least(ctx.key, "11.0"):
        tensor["dtype"] = property(_dtype_get)
    else:
        tensor["dtype"] = property(_dtype_get, _dtype_set)
        layer.update(precision=property(_precision_get, _precision_set), precision_is_set=property(_precision_is_set),
                     reset_precision=_reset_precision, set_output_type=_set_output_type,
                     output_type_is_set=_output_type_is_set, reset_output_type=_reset_output_type)
    if at_least(ctx.key, "10.16"):
        layer["num_ranks"] = property(_num_ranks_get, _num_ranks_set)
    return {"ITensor": tensor, "ILayer": layer}
