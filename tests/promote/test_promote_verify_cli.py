"""`gpt-triton verify`: exit codes and messages for clean, tampered, unsigned and drifted repositories."""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2

from gpt_triton.core.errors import GptTritonError
from gpt_triton.environment import environment_fingerprint
from gpt_triton.promote import cli as verify_cli
from gpt_triton.promote import repository as repo_module
from gpt_triton.promote.repository import promote

Writer = Callable[[str], Callable[[Path], None]]


def run_verify(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The command through its own parser, handled the way gpt_triton.cli.main handles errors."""
    parser = argparse.ArgumentParser()
    verify_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["verify", *argv])
    try:
        code = args.func(args)
    except GptTritonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = exc.exit_code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def repo(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, key: bytes) -> Path:
    root = tmp_path / "repo"
    for payload in "ab":
        promote(root, "m", config, make_writer(payload), {"runtime": "onnxruntime"}, signing_key=key)
    promote(root, "other", config, make_writer("c"), {"runtime": "openvino"}, signing_key=key)
    return root


@pytest.fixture
def key_file(tmp_path: Path, key: bytes, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY", raising=False)
    monkeypatch.delenv("GPT_TRITON_SIGNING_KEY_FILE", raising=False)
    path = tmp_path / "signing.key"
    path.write_text(key.hex())
    return path


def test_clean_repository_exits_zero(repo: Path, key_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_verify([str(repo), "--signing-key-file", str(key_file)], capsys)
    assert code == 0, err
    assert out.count("valid here") == 3 and "FAILED" not in out


def test_tampered_file_exits_nonzero_naming_it(repo: Path, key_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = repo / "m" / "2" / "artifact" / "model.onnx"
    target.write_bytes(target.read_bytes()[:-1] + b"X")
    code, out, err = run_verify([str(repo), "--signing-key-file", str(key_file)], capsys)
    assert code == 2
    assert f"error: tampered file {target}" in err
    assert "FAILED" in out
    # --model narrows the check to a model that is intact.
    code, _, err = run_verify([str(repo), "--model", "other", "--signing-key-file", str(key_file)], capsys)
    assert code == 0, err


def test_edited_model_config_is_named(repo: Path, key_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = repo / "m" / "config.pbtxt"
    original = config.read_text()
    # A canary may pin versions: a version_policy change alone is accepted.
    config.write_text(original.replace("latest {\n    num_versions: 2\n  }", "specific {\n    versions: 1\n    versions: 2\n  }"))
    assert "specific" in config.read_text()
    code, _, err = run_verify([str(repo), "--signing-key-file", str(key_file)], capsys)
    assert code == 0, err
    config.write_text(original.replace("max_batch_size: 8", "max_batch_size: 64"))
    code, _, err = run_verify([str(repo), "--signing-key-file", str(key_file)], capsys)
    assert code == 2 and f"error: tampered file {config}: differs from the config signed with version 2" in err


def test_unsigned_version_and_wrong_key(
    repo: Path, key_file: Path, capsys: pytest.CaptureFixture[str], config: model_config_pb2.ModelConfig,
    make_writer: Writer, tmp_path: Path,
) -> None:
    promote(repo, "m", config, make_writer("d"), {"runtime": "onnxruntime"})  # no key: unsigned
    code, _, err = run_verify([str(repo), "--model", "m", "--signing-key-file", str(key_file)], capsys)
    assert code == 2 and f"unsigned version {repo / 'm' / '3'}" in err

    wrong = tmp_path / "wrong.key"
    wrong.write_text("some other secret")
    code, _, err = run_verify([str(repo), "--model", "other", "--signing-key-file", str(wrong)], capsys)
    assert code == 2 and "signed with a different key" in err


def test_usage_errors(repo: Path, key_file: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run_verify([str(repo)], capsys)
    assert code == 2 and "no signing key: set GPT_TRITON_SIGNING_KEY" in err
    code, _, err = run_verify([str(repo), "--model", "absent", "--signing-key-file", str(key_file)], capsys)
    assert code == 2 and "model absent not found" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_verify([str(tmp_path / "empty"), "--signing-key-file", str(key_file)], capsys)
    assert code == 2 and "no model versions found" in err


def test_drift_exits_one_unless_allowed(
    tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, key: bytes, key_file: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A version promoted on another CPU with another onnxruntime: signed fine, but not valid here."""
    elsewhere: dict[str, Any] = copy.deepcopy(environment_fingerprint())
    elsewhere["device"]["cpu"] = "Intel(R) Xeon(R) Platinum 8480+"
    elsewhere["runtime_versions"]["onnxruntime"] = "1.17.0"
    monkeypatch.setattr(repo_module, "environment_fingerprint", lambda: elsewhere)
    root = tmp_path / "drift"
    promote(root, "m", config, make_writer("a"), {"runtime": "onnxruntime"}, signing_key=key)

    code, out, err = run_verify([str(root), "--signing-key-file", str(key_file)], capsys)
    assert code == 1
    assert "should be re-tuned" in out and "Xeon" in out and "1.17.0" in out
    assert "error: 1 version(s) not valid here; first m/1 should be re-tuned" in err
    code, _, _ = run_verify([str(root), "--signing-key-file", str(key_file), "--allow-drift"], capsys)
    assert code == 0


def test_entry_point(repo: Path, key: bytes) -> None:
    """The real `python -m gpt_triton.cli verify`, with the key in the environment."""
    env = {**os.environ, "GPT_TRITON_SIGNING_KEY": key.hex()}
    env.pop("GPT_TRITON_SIGNING_KEY_FILE", None)
    ok = subprocess.run([sys.executable, "-m", "gpt_triton.cli", "verify", str(repo)], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    (repo / "other" / "1" / "model.py").unlink()
    bad = subprocess.run([sys.executable, "-m", "gpt_triton.cli", "verify", str(repo)], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1] == f"error: missing file {repo / 'other' / '1' / 'model.py'}: it was signed but is gone; re-promote the version"


def test_without_a_key_unsigned_versions_are_named(
    tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, key_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 17 fault 1: verify says the versions are unsigned, not only that it has no key."""
    root = tmp_path / "unsigned"
    for payload in ("a", "b"):
        promote(root, "m", config, make_writer(payload), {"runtime": "onnxruntime"})
    code, _, err = run_verify([str(root)], capsys)
    assert code == 2 and "all 2 version(s) in" in err and "are unsigned (promoted without a signing key; first m/1)" in err
    promote(root, "m", config, make_writer("c"), {"runtime": "onnxruntime"}, signing_key=bytes.fromhex(key_file.read_text()))
    code, _, err = run_verify([str(root)], capsys)
    assert code == 2 and "no signing key" in err and "(2 of 3 unsigned, first m/1)" in err


def test_unbound_versions_are_reported(
    tmp_path: Path, key: bytes, key_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Versions signed before model and version were bound still verify, reported as unbound."""
    from gpt_triton.promote.signing import sign_version_dir

    version = tmp_path / "legacy" / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.onnx").write_bytes(b"weights")
    sign_version_dir(version, key)  # no model or version: the old, unbound document
    code, out, err = run_verify([str(tmp_path / "legacy"), "--signing-key-file", str(key_file), "--allow-drift"], capsys)
    assert code == 0, err
    assert "ok unbound" in out
