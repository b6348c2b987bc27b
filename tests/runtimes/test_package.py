"""The runtime layer as a package: the registry, self-containment, and the copy deploy ships beside the
python-backend adapter working where gpt_triton is not installed, writing nothing into its folder."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import gpt_triton.runtimes as runtimes
from gpt_triton.core.routes import Artifact, Route, Runtime
from gpt_triton.deploy import ADAPTER_SOURCE, write_version_files
from gpt_triton.runtimes import RUNTIMES, UnknownRuntimeError, get_runtime

PACKAGE = Path(runtimes.__file__).parent
# What a runtime module may import: the standard library, numpy and the runtime libraries themselves.
ALLOWED = set(sys.stdlib_module_names) | {"numpy", "onnxruntime", "openvino", "tensorrt", "cuda"}


def test_every_artifact_runtime_has_a_runtime() -> None:
    assert set(RUNTIMES) == set(typing.get_args(Runtime))
    for name, runtime in RUNTIMES.items():
        assert runtime.name == name and get_runtime(name) is runtime


def test_unknown_runtime_names_the_known_ones() -> None:
    with pytest.raises(UnknownRuntimeError, match="onnxruntime") as caught:
        get_runtime("tflite")
    assert isinstance(caught.value, ValueError) and "tflite" in str(caught.value)


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_modules_import_nothing_from_gpt_triton(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            continue  # a sibling, by relative import: shipped together
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            assert name.split(".")[0] in ALLOWED, f"{module} imports {name}: the adapter ships this module without it"


def _import_runtimes_source() -> str:
    """The adapter's own loader function, so the test runs the code Triton runs."""
    source = ADAPTER_SOURCE.read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_import_runtimes")
    segment = ast.get_source_segment(source, node)
    assert segment is not None
    return segment


def test_shipped_copy_runs_without_gpt_triton_and_writes_nothing(tiny_model_path: Path, tmp_path: Path) -> None:
    options = {"session_options": {"intra_op_num_threads": 1}, "config_entries": {"session.intra_op.allow_spinning": "0"}}
    artifact = Artifact(family="onnxruntime", runtime="onnxruntime", route=Route(family="onnxruntime"),
                        directory=str(tiny_model_path.parent), files=[tiny_model_path.name], runtime_options=options)
    version = tmp_path / "1"
    write_version_files(version, artifact, "python")
    shipped = version / "gpt_triton_runtimes"
    assert sorted(p.name for p in shipped.glob("*.py")) == sorted(p.name for p in PACKAGE.glob("*.py"))
    before = sorted(p.relative_to(version).as_posix() for p in version.rglob("*"))
    script = "\n".join([
        "import hashlib, importlib.util, json, sys",
        "from pathlib import Path",
        "import numpy as np",
        "sys.modules['gpt_triton'] = None  # as in production Triton: importing gpt_triton fails",
        "RUNTIMES_DIR = 'gpt_triton_runtimes'",
        _import_runtimes_source(),
        "version = Path(sys.argv[1])",
        "rt = _import_runtimes(version)",
        "assert _import_runtimes(version) is rt",
        "assert not rt.__name__.startswith('gpt_triton.')",
        "out = rt.run_once('onnxruntime', version / 'model.onnx', json.loads(sys.argv[2]), {'x': np.ones((2, 16), np.float32)})",
        "print(json.dumps({k: list(v.shape) for k, v in out.items()}))",
    ])
    # Bytecode writing left on (Triton's stub ignores PYTHONDONTWRITEBYTECODE): the shipped pycs must be used.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, "-c", script, str(version), json.dumps(options)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"y": [2, 4]}
    assert sorted(p.relative_to(version).as_posix() for p in version.rglob("*")) == before
