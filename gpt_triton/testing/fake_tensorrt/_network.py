"""INetworkDefinition, ITensor and ILayer, filled by the fake OnnxParser (``_onnx``) from a real ONNX model.

Bindings followed: python/src/infer/pyGraph.cpp (ITensor, ILayer, INetworkDefinition) at the tags in
``_releases.RELEASES``.

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
from typing import Any

from gpt_triton.testing.fake_tensorrt._releases import at_least
from gpt_triton.testing.fake_tensorrt._types import Context, Dims, check_enum, check_str, to_dims

_DEPRECATED = "Deprecated in TensorRT 10.12. Superseded by strong typing."


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
