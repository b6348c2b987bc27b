"""Two processes promoting into the same model: the second waits (logged, bounded) for the first, and
is refused with the holder's pid and a transient exit code only when the wait runs out (issue 17 fault 7)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from gpt_triton.core.errors import EXIT_TRANSIENT, GptTritonError, TransientError
from gpt_triton.promote.lock import promotion_lock
from gpt_triton.promote.repository import list_versions, promote

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gpt_triton.promote.lock import promotion_lock

    with promotion_lock(Path(sys.argv[1]), "m"):
        print("locked", flush=True)
        sys.stdin.read()  # hold the lock until the test closes our stdin
    print("released", flush=True)
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    model_dir = tmp_path / "repo" / "m"
    model_dir.mkdir(parents=True)
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(model_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "locked"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


PROMOTER = textwrap.dedent(
    """
    import logging, sys
    from pathlib import Path
    from tritonclient.grpc import model_config_pb2
    from gpt_triton.promote.repository import promote

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
    def write(version_dir):
        (version_dir / "model.onnx").write_bytes(b"second")
    promoted = promote(Path(sys.argv[1]), "m", model_config_pb2.ModelConfig(backend="python"), write, {})
    print("promoted", promoted.version, flush=True)
    """
)


def test_short_wait_is_refused_as_transient(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    model_dir = tmp_path / "repo" / "m"
    busy = rf"another promotion into m is in progress \(pid {holder.pid}\)"
    with pytest.raises(TransientError, match=busy) as caught, promotion_lock(model_dir, "m", wait_s=0.2):
        pass
    assert caught.value.exit_code == EXIT_TRANSIENT


def test_second_promotion_waits_for_the_first(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    """A concurrent promotion (another process) waits, says so in its log, and lands once the first is done."""
    promoter = subprocess.Popen([sys.executable, "-c", PROMOTER, str(tmp_path / "repo")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert promoter.stderr is not None and promoter.stdout is not None
        line = promoter.stderr.readline()  # blocks until the promoter logs that it waits
        assert "waiting for the promotion lock of m" in line and f"pid {holder.pid}" in line, line
        assert list_versions(tmp_path / "repo" / "m") == []
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        assert holder.stdout.readline().strip() == "released"
        assert promoter.stdout.readline().strip() == "promoted 1"
        assert promoter.wait(timeout=60) == 0
    finally:
        if promoter.poll() is None:
            promoter.kill()
        promoter.wait(timeout=30)
    assert list_versions(tmp_path / "repo" / "m") == [1]


def test_wait_comes_from_the_environment(tmp_path: Path, holder: subprocess.Popen[str],
                                         monkeypatch: pytest.MonkeyPatch, config: model_config_pb2.ModelConfig,
                                         make_writer: Callable[[str], Callable[[Path], None]]) -> None:
    monkeypatch.setenv("GPT_TRITON_LOCK_WAIT_S", "0.2")
    with pytest.raises(TransientError, match="waited 0 s"):
        promote(tmp_path / "repo", "m", config, make_writer("a"), {})
    monkeypatch.setenv("GPT_TRITON_LOCK_WAIT_S", "soon")
    with pytest.raises(GptTritonError, match="is not a number of seconds"):
        promote(tmp_path / "repo", "m", config, make_writer("a"), {})


def test_lock_dies_with_its_holder(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait(timeout=30)
    with promotion_lock(tmp_path / "repo" / "m", "m", wait_s=5.0) as path:
        assert path.read_text().strip().isdigit()
