"""`gpt-triton verify --json`: the table's verdict as one JSON object with stable keys and the exit code."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from gpt_triton.promote.repository import promote

from .test_promote_verify_cli import run_verify

Writer = Callable[[str], Callable[[Path], None]]


@pytest.fixture
def repo(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, key: bytes) -> Path:
    root = tmp_path / "repo"
    for payload in "ab":
        promote(root, "m", config, make_writer(payload), {"runtime": "onnxruntime"}, signing_key=key)
    return root


@pytest.fixture
def key_file(tmp_path: Path, key: bytes, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    path = tmp_path / "signing.key"
    path.write_text(key.hex())
    return path


def test_clean_repository_as_json(repo: Path, key_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_verify([str(repo), "--signing-key-file", str(key_file), "--json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["schema"] == "gpt-triton.verify/1" and result["exit_code"] == 0 and result["error"] is None
    assert [(v["model"], v["version"], v["signatures_ok"], v["verdict"]) for v in result["versions"]] == [
        ("m", 1, True, "valid"), ("m", 2, True, "valid")]


def test_tampered_repository_as_json_keeps_exit_code_and_error_line(
    repo: Path, key_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    target = repo / "m" / "2" / "artifact" / "model.onnx"
    target.write_bytes(target.read_bytes()[:-1] + b"X")
    code, out, err = run_verify([str(repo), "--signing-key-file", str(key_file), "--json"], capsys)
    assert code == 2 and err.startswith("error: tampered file")
    result = json.loads(out)
    assert result["exit_code"] == 2 and "tampered file" in result["error"]
    second = next(v for v in result["versions"] if v["version"] == 2)
    assert second["signatures_ok"] is False and "tampered" in second["signature_error"]
