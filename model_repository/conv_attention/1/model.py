"""gpt-triton runtime adapter: serves one built artifact (ONNX Runtime or OpenVINO) on Triton's python backend.

Copied into each model version directory next to the artifact files and ``gpt_triton_runtime.json``
(``{"runtime", "entry", "runtime_options"}``), so two versions of one model may use different runtimes.

Latency matters more than elegance here (the target is served <= 1.10x in-process at concurrency 1):
* inputs are read with ``as_numpy()`` (a view on the python backend's shared memory, no copy) and fed
  to the runtime as they are; outputs go straight into ``pb_utils.Tensor``;
* when Triton hands over several requests (dynamic batching), they are concatenated along axis 0 and
  run once, and the outputs are split back by each request's batch size (views, no copy);
* OpenVINO runs through one reused InferRequest (each Triton instance is its own stub process);
* nothing is imported or looked up per request that could be resolved at initialize.

A version directory that carries ``signatures.json`` is verified with
``gpt_triton.promote.signing.verify_version_dir`` before anything is loaded; if that module cannot be
imported, the version is refused rather than served unverified. Errors in initialize raise, and Triton
reports them as the model's load error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

RUNTIME_FILE = "gpt_triton_runtime.json"
SIGNATURES_FILE = "signatures.json"


def _verify_signatures(version_dir: Path) -> None:
    if not (version_dir / SIGNATURES_FILE).is_file():
        return
    try:
        from gpt_triton.promote.signing import verify_version_dir
    except ImportError as exc:
        raise RuntimeError(
            f"{version_dir} is signed but gpt_triton.promote.signing cannot be imported ({exc}); "
            "refusing to serve an unverified version"
        ) from exc
    try:
        verify_version_dir(version_dir)
    except Exception as exc:  # GptTritonError and anything unexpected: refuse either way
        raise RuntimeError(f"signature verification failed: {exc}") from exc


class _OrtRunner:
    def __init__(self, path: Path, options: dict) -> None:
        import onnxruntime as ort

        session_options = ort.SessionOptions()
        for key, value in (options.get("session_options") or {}).items():
            if key == "graph_optimization_level":
                value = getattr(ort.GraphOptimizationLevel, value)
            elif key == "execution_mode":
                value = getattr(ort.ExecutionMode, value)
            if not hasattr(session_options, key):
                raise ValueError(f"unknown ONNX Runtime session option {key!r}")
            setattr(session_options, key, value)
        for key, value in (options.get("config_entries") or {}).items():
            session_options.add_session_config_entry(key, str(value))
        self.session = ort.InferenceSession(str(path), session_options, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict) -> dict:
        return dict(zip(self.output_names, self.session.run(self.output_names, feeds), strict=True))


class _OpenVinoRunner:
    def __init__(self, path: Path, options: dict) -> None:
        import openvino as ov

        core = ov.Core()
        compiled = core.compile_model(core.read_model(str(path)), options.get("device", "CPU"), options.get("config") or {})
        self.request = compiled.create_infer_request()
        self.ports = list(compiled.outputs)

    def bind_outputs(self, names: list) -> None:
        # An output port carries every tensor name of the ONNX graph that aliases it (an Identity's input
        # and output, for one): match by the name Triton asks for, not by get_any_name().
        self.outputs = []
        for index, name in enumerate(names):
            matches = [port for port in self.ports if name in port.get_names()]
            self.outputs.append((name, matches[0] if matches else self.ports[index]))

    def run(self, feeds: dict) -> dict:
        # share_inputs: OpenVINO reads the numpy buffers in place. Output tensors belong to the request
        # and are overwritten by the next run, which is fine: pb_utils.Tensor copies them to shm first.
        self.request.infer(feeds, share_inputs=True, share_outputs=True)
        return {name: self.request.get_tensor(port).data for name, port in self.outputs}


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / str(args["model_version"])
        _verify_signatures(version_dir)
        description = json.loads((version_dir / RUNTIME_FILE).read_text())
        runtime = description["runtime"]
        entry = version_dir / description["entry"]
        options = description.get("runtime_options") or {}
        if runtime == "onnxruntime":
            self.runner = _OrtRunner(entry, options)
        elif runtime == "openvino":
            self.runner = _OpenVinoRunner(entry, options)
        else:
            raise ValueError(f"runtime {runtime!r} cannot run on the python backend (needs its native backend)")
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.input_names = [t["name"] for t in config["input"]]
        self.outputs = [
            (t["name"], pb_utils.triton_string_to_numpy(t["data_type"])) for t in config["output"]
        ]
        if hasattr(self.runner, "bind_outputs"):
            self.runner.bind_outputs([name for name, _ in self.outputs])

    def _inputs(self, request) -> dict:
        return {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.input_names}

    def _response(self, results: dict, rows: slice | None = None):
        tensors = []
        for name, dtype in self.outputs:
            value = results[name] if rows is None else results[name][rows]
            tensors.append(pb_utils.Tensor(name, np.ascontiguousarray(value, dtype=dtype)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests: list) -> list:
        if len(requests) == 1 or not self.batched:
            return [self._execute_one(request) for request in requests]
        try:
            feeds = [self._inputs(request) for request in requests]
            sizes = [len(next(iter(feed.values()))) for feed in feeds]
            merged = {name: np.concatenate([feed[name] for feed in feeds]) for name in self.input_names}
            results = self.runner.run(merged)
        except Exception as exc:  # one bad request must not fail silently: fall back to one run each
            del exc
            return [self._execute_one(request) for request in requests]
        responses, start = [], 0
        for size in sizes:
            responses.append(self._response(results, slice(start, start + size)))
            start += size
        return responses

    def _execute_one(self, request):
        try:
            return self._response(self.runner.run(self._inputs(request)))
        except Exception as exc:
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}"))

    def finalize(self) -> None:
        self.runner = None
