"""Atomic promotion: numbering, provenance, config, pruning, and nothing half-written on failure."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.model_info import sha256_file
from gpt_triton.promote import repository as repo_module
from gpt_triton.promote.repository import list_versions, next_version, promote
from gpt_triton.promote.signing import verify_version_dir

Writer = Callable[[str], Callable[[Path], None]]
PROVENANCE = {"run_id": "run-1", "runtime": "onnxruntime", "route": "onnxruntime: -level=all", "latency_ms": {"p99": 1.5}}


def _promote(repo: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, payload: str, **kwargs: object):  # type: ignore[no-untyped-def]
    return promote(repo, "m", config, make_writer(payload), PROVENANCE, **kwargs)  # type: ignore[arg-type]


def _parsed_config(model_dir: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def _leftovers(model_dir: Path) -> list[str]:
    return sorted(p.name for p in model_dir.iterdir() if p.name.startswith(".") and p.name != ".gpt-triton.lock")


def test_numbering_provenance_and_config(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, key: bytes) -> None:
    model_dir = tmp_path / "repo" / "m"
    assert next_version(model_dir) == 1
    first = _promote(tmp_path / "repo", config, make_writer, "a", signing_key=key)
    second = _promote(tmp_path / "repo", config, make_writer, "b", signing_key=key)
    assert (first.version, second.version) == (1, 2)
    assert second.path == model_dir / "2" and next_version(model_dir) == 3

    manifest = json.loads((second.path / "provenance.json").read_text())
    assert manifest == second.manifest
    assert manifest["run_id"] == "run-1" and manifest["version"] == 2 and manifest["model_name"] == "m"
    assert manifest["environment"]["runtime_versions"]["onnxruntime"]
    assert manifest["environment"]["device"]["cores"] >= 1
    # File digests cover what write_version wrote plus the adapter's byte-compiled form (so Triton's
    # import writes nothing into the signed folder), and they are the files' real digests.
    pyc = Path(importlib.util.cache_from_source(str(second.path / "model.py"))).relative_to(second.path).as_posix()
    assert manifest["files"] == {
        rel: sha256_file(second.path / rel)
        for rel in ("artifact/model.onnx", "model.py", pyc, "promoted_config.pbtxt")
    }
    assert (second.path / "promoted_config.pbtxt").read_text() == (model_dir / "config.pbtxt").read_text()
    verify_version_dir(second.path, key)

    parsed = _parsed_config(model_dir)
    assert parsed.name == "m" and parsed.max_batch_size == 8 and parsed.input[0].name == "x"
    assert parsed.version_policy.latest.num_versions == 2  # no serving version known: keep two loadable
    assert _leftovers(model_dir) == []


def test_gaps_are_not_reused(tmp_path: Path) -> None:
    for name in ("1", "4", "notaversion", ".tmp-x"):
        (tmp_path / name).mkdir()
    assert list_versions(tmp_path) == [1, 4]
    assert next_version(tmp_path) == 5


def test_serving_version_policy(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer) -> None:
    repo = tmp_path / "repo"
    _promote(repo, config, make_writer, "a")
    _promote(repo, config, make_writer, "b", serving_version=1)
    assert list(_parsed_config(repo / "m").version_policy.specific.versions) == [1, 2]
    with pytest.raises(GptTritonError, match="serving version 7 of m is not in"):
        _promote(repo, config, make_writer, "c", serving_version=7)
    assert list_versions(repo / "m") == [1, 2]


def test_failure_inside_write_version_leaves_nothing(
    tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer,
    tree_digest: Callable[[Path], dict[str, str]], key: bytes,
) -> None:
    repo = tmp_path / "repo"
    _promote(repo, config, make_writer, "a", signing_key=key)
    _promote(repo, config, make_writer, "b", signing_key=key)
    before = tree_digest(repo / "m")

    def failing(version_dir: Path) -> None:
        make_writer("c")(version_dir)
        raise RuntimeError("disk full while copying the engine")

    with pytest.raises(RuntimeError, match="disk full"):
        promote(repo, "m", config, failing, PROVENANCE, signing_key=key)
    assert tree_digest(repo / "m") == before  # versions and config.pbtxt byte-identical
    assert list_versions(repo / "m") == [1, 2]
    assert _leftovers(repo / "m") == []


def test_failure_at_config_rename_removes_the_new_version(
    tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer,
    tree_digest: Callable[[Path], dict[str, str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = tmp_path / "repo"
    _promote(repo, config, make_writer, "a")
    before = tree_digest(repo / "m")
    real_replace = os.replace

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(dst).endswith("config.pbtxt"):
            raise OSError(28, "No space left on device", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(repo_module.os, "replace", failing_replace)
    with pytest.raises(GptTritonError, match="config.pbtxt failed: No space left on device; nothing was changed"):
        _promote(repo, config, make_writer, "b")
    assert tree_digest(repo / "m") == before
    assert _leftovers(repo / "m") == []


def test_reserved_files_and_empty_versions_are_refused(tmp_path: Path, config: model_config_pb2.ModelConfig) -> None:
    with pytest.raises(GptTritonError, match="wrote no files"):
        promote(tmp_path, "m", config, lambda d: None, PROVENANCE)
    def forging(version_dir: Path) -> None:
        (version_dir / "provenance.json").write_text("{}")

    with pytest.raises(GptTritonError, match="must not write provenance.json"):
        promote(tmp_path, "m", config, forging, PROVENANCE)
    assert list_versions(tmp_path / "m") == [] and _leftovers(tmp_path / "m") == []


def test_unwritable_repository_names_the_path(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the repository should be")
    with pytest.raises(GptTritonError, match=f"cannot write to repository {blocker}/repo"):
        promote(blocker / "repo", "m", config, make_writer("a"), PROVENANCE)


def test_bad_model_name(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer) -> None:
    with pytest.raises(GptTritonError, match="bad model name"):
        promote(tmp_path, "../escape", config, make_writer("a"), PROVENANCE)
    # Issue 17 fault 11: "$" matched before a trailing newline, so "m\n" was accepted (a folder named "m\n").
    for name in ("m\n", "m\nother", "m\r", ".hidden", ""):
        with pytest.raises(GptTritonError, match="bad model name"):
            promote(tmp_path, name, config, make_writer("a"), PROVENANCE)
    assert not list(tmp_path.iterdir())


def test_unsigned_promotion_says_so(
    tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer, key: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="gpt_triton.promote.repository"):
        unsigned = promote(tmp_path, "m", config, make_writer("a"), PROVENANCE)
    assert not unsigned.signed
    assert "promoted m version 1 UNSIGNED: no signing key is set" in caplog.text
    assert "gpt_triton_signed" not in (tmp_path / "m" / "config.pbtxt").read_text()
    caplog.clear()
    with caplog.at_level("WARNING", logger="gpt_triton.promote.repository"):
        assert promote(tmp_path, "m", config, make_writer("b"), PROVENANCE, signing_key=key).signed
    assert "UNSIGNED" not in caplog.text


def test_pruning_only_below_the_serving_version(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer) -> None:
    repo = tmp_path / "repo"
    for payload in "abcd":
        _promote(repo, config, make_writer, payload, keep_versions=2)
    # No serving version given (as tune promotes): the config served the two newest (latest 2), 2 and 3,
    # before version 4; they stay, and only 1 goes (tests/promote/test_promote_pruning.py).
    assert list_versions(repo / "m") == [2, 3, 4]

    result = _promote(repo, config, make_writer, "e", keep_versions=2, serving_version=2)
    # Newest two are 4 and 5; 3 is newer than the serving 2 (may still be needed): nothing goes.
    assert result.pruned == [] and list_versions(repo / "m") == [2, 3, 4, 5]

    result = _promote(repo, config, make_writer, "f", keep_versions=2, serving_version=5)
    assert result.pruned == [2, 3, 4] and list_versions(repo / "m") == [5, 6]
    assert _leftovers(repo / "m") == []


def test_keep_versions_must_be_positive(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer) -> None:
    with pytest.raises(GptTritonError, match="keep_versions must be at least 1"):
        _promote(tmp_path, config, make_writer, "a", keep_versions=0)


def test_killed_promotion_is_cleaned_by_the_next(tmp_path: Path, config: model_config_pb2.ModelConfig, make_writer: Writer) -> None:
    """SIGKILL mid-write leaves only a hidden temp folder Triton ignores; the next promotion removes it."""
    repo = tmp_path / "repo"
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from tritonclient.grpc import model_config_pb2
        from gpt_triton.promote.repository import promote

        def write(d):
            (d / "model.py").write_text("half")
            os.kill(os.getpid(), signal.SIGKILL)

        promote(Path({str(repo)!r}), "m", model_config_pb2.ModelConfig(backend="python"), write, {{}})
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert list_versions(repo / "m") == []
    assert [n for n in _leftovers(repo / "m") if n.startswith(".tmp-")]  # the half-written folder is hidden
    assert not (repo / "m" / "config.pbtxt").exists()

    _promote(repo, config, make_writer, "a")
    assert list_versions(repo / "m") == [1] and _leftovers(repo / "m") == []
