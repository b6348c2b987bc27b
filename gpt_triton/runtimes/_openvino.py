"""OpenVINO: a compiled model and one reused InferRequest, from an artifact's ``runtime_options``.

Options (the schema the openvino family writes)::

    {"device": "CPU",                                   # default
     "config": {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}}

``config`` keys are checked against the device's SUPPORTED_PROPERTIES when the runner is opened; their
values are checked by OpenVINO when it compiles (``activate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ._base import (
    Feeds,
    NativeBackendConfig,
    Outputs,
    Runner,
    RunnerError,
    RunnerStateError,
    Runtime,
    RuntimeOptionError,
    RuntimeUnavailableError,
    check_keys,
    mapping_option,
    require_file,
)

NAME = "openvino"
_OPTIONS = {
    "device": "an OpenVINO device name, default 'CPU'",
    "config": "a mapping of compile-time properties, e.g. {'NUM_STREAMS': '1'}",
}
# The OpenVINO backend reads these parameters (ModelState::ParseParameters); INFERENCE_PRECISION_HINT
# is only expressible as HINT_BF16=YES.
_OV_PARAMETERS = {"PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"}
# Devices that wrap others ("AUTO:CPU", "HETERO:GPU,CPU"); their properties are the wrapped devices'.
_VIRTUAL = {"AUTO", "MULTI", "HETERO", "BATCH"}


def _import_ov() -> Any:
    try:
        import openvino
    except Exception as exc:  # any import failure: unavailable, with the reason
        raise RuntimeUnavailableError(
            f"openvino cannot be imported ({type(exc).__name__}: {exc}); pip install openvino"
        ) from exc
    return openvino


def _check_device_and_config(core: Any, device: Any, config: Mapping[str, Any]) -> None:
    if not isinstance(device, str) or not device:
        raise RuntimeOptionError(NAME, "device", "a device name such as 'CPU'", device)
    base = device.split(":")[0].split(".")[0]
    available = list(core.available_devices)
    if base not in _VIRTUAL and device not in available and base not in {d.split(".")[0] for d in available}:
        raise RuntimeOptionError(NAME, "device", f"a device OpenVINO finds here: {available}", device)
    for key, value in config.items():
        if not isinstance(value, (str, int, float, bool)):
            raise RuntimeOptionError(NAME, f"config.{key}", "a string, number or boolean property value", value)
    if base in _VIRTUAL:
        return
    try:
        supported = set(core.get_property(device, "SUPPORTED_PROPERTIES"))
    except Exception:  # a plugin that cannot list its properties: leave the check to compile_model
        return
    for key in config:
        if key not in supported:
            raise RuntimeOptionError(NAME, f"config.{key}", f"a property the {device} plugin supports: {sorted(supported)}")


class OpenVinoRunner(Runner):
    def __init__(self, entry: Path, core: Any, device: str, config: dict[str, Any],
                 output_names: Sequence[str] | None, reuse_outputs: bool) -> None:
        super().__init__(f"{NAME}:{entry}")
        self.entry = entry
        self._core, self._device, self._config = core, device, config
        self._wanted, self._reuse = output_names, reuse_outputs
        self._compiled: Any = None
        self._request: Any = None
        self._bound: list[tuple[str, Any]] = []

    @property
    def compiled_model(self) -> Any:
        """The live ``openvino.CompiledModel`` (while active), e.g. to read the properties it applied."""
        if self._compiled is None:
            raise RunnerStateError(f"{self.name} has no compiled model until activate()")
        return self._compiled

    def _activate(self) -> Sequence[str]:
        try:
            model = self._core.read_model(str(self.entry))
            compiled = self._core.compile_model(model, self._device, self._config)
        except Exception as exc:
            detail = [line for line in str(exc).splitlines() if line.strip()]
            raise RunnerError(
                f"OpenVINO could not compile {self.entry} for {self._device} with config {self._config}: "
                f"{detail[-1] if detail else type(exc).__name__}"
            ) from exc
        ports = list(compiled.outputs)
        # The read model's ports carry the declared output names; the compiled ports may add aliases.
        declared = [port.get_any_name() for port in model.outputs]
        names = declared if self._wanted is None else list(self._wanted)
        # An output port carries every tensor name of the ONNX graph that aliases it (an Identity's input
        # and output, for one): bind by the name asked for, not by get_any_name().
        # No positional fallback: a name that matches no port is an error, never another output served.
        self._bound = []
        for name in names:
            matches = [port for port in ports if name in port.get_names()]
            if not matches:
                raise RunnerError(f"{self.name}: no output named {name!r}; the model's outputs are {declared}")
            self._bound.append((name, matches[0]))
        # One request, reused: no per-request allocation (each Triton instance is its own process).
        self._request = compiled.create_infer_request()
        self._compiled = compiled
        return names

    def _infer(self, feeds: Feeds) -> Outputs:
        # share_inputs: OpenVINO reads the numpy buffers in place. share_outputs: the arrays are the
        # request's own tensors, overwritten by the next infer; only when the caller asked for that.
        results = self._request.infer(feeds, share_inputs=True, share_outputs=self._reuse)
        return {name: results[port] for name, port in self._bound}

    def _deactivate(self) -> None:
        self._request, self._compiled = None, None
        self._bound = []


class OpenVino(Runtime):
    name = NAME
    backend = "openvino"

    def availability(self) -> tuple[bool, str]:
        try:
            devices = _import_ov().Core().available_devices
        except Exception as exc:  # never raises: any failure is a reason
            return False, str(exc)
        if "CPU" not in devices:
            return False, f"OpenVINO has no CPU device (devices: {devices})"
        return True, ""

    def precisions(self, device: str = "CPU") -> frozenset[str]:
        """The precisions ``device`` computes natively (OPTIMIZATION_CAPABILITIES, upper-cased: "FP32",
        "BF16", "INT8", ...). A bf16 hint on a CPU without "BF16" runs in f32: no reduced precision at all."""
        core = _import_ov().Core()
        return frozenset(str(c).upper() for c in core.get_property(device, "OPTIMIZATION_CAPABILITIES"))

    def open(
        self, entry: Path, options: Mapping[str, Any], *, output_names: Sequence[str] | None = None,
        reuse_outputs: bool = False,
    ) -> OpenVinoRunner:
        check_keys(NAME, options, _OPTIONS)
        device = options.get("device", "CPU")
        config = dict(mapping_option(NAME, options, "config"))
        core = _import_ov().Core()
        _check_device_and_config(core, device, config)
        return OpenVinoRunner(require_file(NAME, entry), core, device, config, output_names, reuse_outputs)

    def native_config(self, options: Mapping[str, Any]) -> NativeBackendConfig | None:
        if not isinstance(options, Mapping) or set(options) - set(_OPTIONS):
            return None
        if options.get("device", "CPU") != "CPU":
            return None
        params: dict[str, str] = {}
        for key, value in (options.get("config") or {}).items():
            if key in _OV_PARAMETERS:
                params[key] = str(value)
            elif key == "INFERENCE_PRECISION_HINT" and str(value) == "bf16":
                params["HINT_BF16"] = "YES"
            else:  # e.g. an f32 precision hint: the backend would fall back to the CPU's default (bf16 here)
                return None
        return NativeBackendConfig(backend=self.backend, parameters=params)
