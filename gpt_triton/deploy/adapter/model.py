"""gpt-triton runtime adapter: serves one built artifact (ONNX Runtime or OpenVINO) on Triton's python backend.

Copied into each model version directory next to the artifact files, ``gpt_triton_runtime.json``
(``{"runtime", "entry", "runtime_options"}``) and ``gpt_triton_runtimes/`` (a copy of
``gpt_triton.runtimes``, the runners every other stage measures with: production Triton has no
gpt_triton installed), so two versions of one model may use different runtimes.

Latency matters more than elegance here (the target is served <= 1.10x in-process at concurrency 1):
* inputs are read with ``as_numpy()`` (a view on the python backend's shared memory, no copy) and fed
  to the runtime as they are; outputs go straight into ``pb_utils.Tensor``;
* when Triton hands over several requests (dynamic batching), they are concatenated along axis 0 and
  run once, and the outputs are split back by each request's batch size (views, no copy);
* OpenVINO runs through one reused InferRequest (each Triton instance is its own stub process) whose
  output tensors are read in place (``reuse_outputs``): ``pb_utils.Tensor`` copies them before the next run;
* nothing is imported or looked up per request that could be resolved at initialize (the runner's
  ``infer`` is bound once).

Before anything is loaded, ``gpt_triton.promote.signing.verify_before_load`` checks the version when a
signing key is set in Triton's environment, when the version carries ``signatures.json``, or when the
model config says its versions are signed (``gpt_triton_signing_key_id``, written at promotion): the
files, the model name and version they were signed for, and the model-level ``config.pbtxt`` on disk.
A missing or unreadable signatures.json is then a refusal, never a skip; if that module cannot be
imported, the version is refused rather than served unverified. With none of the three (an unsigned
repository and no key: the demo), nothing is checked. The shipped runtime modules are imported only
after that check. Errors in initialize raise, and Triton reports them as the model's
load error.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

RUNTIME_FILE = "gpt_triton_runtime.json"
SIGNATURES_FILE = "signatures.json"
RUNTIMES_DIR = "gpt_triton_runtimes"  # deploy's copy of gpt_triton.runtimes, beside this file
KEY_ENVS = ("GPT_TRITON_SIGNING_KEY", "GPT_TRITON_SIGNING_KEY_FILE")  # as gpt_triton.promote.signing reads them
KEY_ID_PARAMETER = "gpt_triton_signing_key_id"  # promotion's mark of a signed model, in config.pbtxt


def _declared_key_id(config: dict) -> str | None:
    value = (config.get("parameters") or {}).get(KEY_ID_PARAMETER)
    text = value.get("string_value") if isinstance(value, dict) else None
    return str(text) if text else None


def _verify_signatures(version_dir: Path, config: dict) -> None:
    declared = _declared_key_id(config)
    key_set = any(name in os.environ for name in KEY_ENVS)
    # lexists: a signatures.json that is a dangling link or unreadable is a reason to check, not to skip.
    if not (key_set or declared or os.path.lexists(version_dir / SIGNATURES_FILE)):
        return  # unsigned repository, no key on this server: nothing to verify against
    try:
        from gpt_triton.promote.signing import verify_before_load
    except ImportError as exc:
        raise RuntimeError(
            f"{version_dir} must be verified but gpt_triton.promote.signing cannot be imported ({exc}); "
            "install gpt-triton in Triton's python environment (refusing to serve an unverified version)"
        ) from exc
    try:
        verify_before_load(version_dir, declared)
    except Exception as exc:  # GptTritonError and anything unexpected: refuse either way
        raise RuntimeError(f"signature verification failed: {exc}") from exc


def _import_runtimes(version_dir: Path):
    """The runtime package shipped in ``version_dir``, imported by file path.

    Triton's stub imports model.py by path, so nothing beside it is importable by name. The package gets
    a name unique to its folder (two versions in one process never share a copy) and is registered in
    sys.modules so its modules' relative imports resolve. Its bytecode was shipped with it (deploy
    byte-compiles it like model.py), so importing writes nothing into a signed version directory.
    """
    package_dir = version_dir / RUNTIMES_DIR
    init = package_dir / "__init__.py"
    if not init.is_file():
        raise RuntimeError(f"{package_dir} is missing: deploy this version again with gpt-triton (it ships the runtimes)")
    name = "gpt_triton_runtimes_" + hashlib.sha256(str(package_dir.resolve()).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(package_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / str(args["model_version"])
        _verify_signatures(version_dir, config)
        description = json.loads((version_dir / RUNTIME_FILE).read_text())
        runtimes = _import_runtimes(version_dir)
        runtime = runtimes.get_runtime(description["runtime"])
        if not runtime.python_backend:
            raise ValueError(f"runtime {runtime.name!r} cannot run on the python backend (needs its native backend)")
        self.batched = int(config.get("max_batch_size", 0)) > 0
        self.input_names = [t["name"] for t in config["input"]]
        self.outputs = [
            (t["name"], pb_utils.triton_string_to_numpy(t["data_type"])) for t in config["output"]
        ]
        # Outputs in Triton's order, bound by name once; reused output buffers are safe because
        # _response copies them into pb_utils.Tensor before the next run.
        self.runner = runtime.open(
            version_dir / description["entry"], description.get("runtime_options") or {},
            output_names=[name for name, _ in self.outputs], reuse_outputs=True,
        ).activate()
        self.run = self.runner.infer

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
            results = self.run(merged)
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
            return self._response(self.run(self._inputs(request)))
        except Exception as exc:
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}"))

    def finalize(self) -> None:
        runner, self.runner, self.run = self.runner, None, None
        if runner is not None and runner.is_active:
            runner.deactivate()
