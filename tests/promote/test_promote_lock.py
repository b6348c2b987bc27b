"""Two processes promoting into the same model: the second is refused with the holder's pid."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from gpt_triton.core.errors import GptTritonError
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


def test_second_promotion_is_refused_then_proceeds(
    tmp_path: Path, holder: subprocess.Popen[str], config: model_config_pb2.ModelConfig,
    make_writer: Callable[[str], Callable[[Path], None]],
) -> None:
    model_dir = tmp_path / "repo" / "m"
    busy = rf"another promotion into m is in progress \(pid {holder.pid}\)"
    with pytest.raises(GptTritonError, match=busy), promotion_lock(model_dir, "m", wait_s=0.2):
        pass
    with pytest.raises(GptTritonError, match=busy):
        promote(tmp_path / "repo", "m", config, make_writer("a"), {})
    assert list_versions(model_dir) == []

    # Once the holder lets go, the same promotion goes through.
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.close()
    assert holder.stdout.readline().strip() == "released"
    assert holder.wait(timeout=30) == 0
    assert promote(tmp_path / "repo", "m", config, make_writer("a"), {}).version == 1


def test_lock_dies_with_its_holder(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait(timeout=30)
    with promotion_lock(tmp_path / "repo" / "m", "m", wait_s=5.0) as path:
        assert path.read_text().strip().isdigit()
