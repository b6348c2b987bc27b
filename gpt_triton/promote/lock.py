"""One promotion per model at a time: an advisory ``flock`` on ``<model_dir>/.gpt-triton.lock``.

flock is released by the kernel when the holder dies, so a crashed promotion never leaves a stale lock.
The lock file is never deleted: unlinking it while another process waits would let two holders lock
two different inodes.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpt_triton.core.errors import GptTritonError

LOCK_FILE = ".gpt-triton.lock"


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "unknown"


@contextmanager
def promotion_lock(model_dir: Path, model_name: str | None = None, wait_s: float = 2.0) -> Iterator[Path]:
    """Hold the model's promotion lock for the ``with`` body; yields the lock file's path.

    Waits up to ``wait_s`` (a promotion that just finished may still be closing), then raises
    GptTritonError naming the holder's pid.
    """
    model_dir = Path(model_dir)
    path = model_dir / LOCK_FILE
    name = model_name or model_dir.name
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise GptTritonError(f"cannot create lock file {path}: {exc.strerror or exc}; check the repository is writable") from exc
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise GptTritonError(
                        f"another promotion into {name} is in progress (pid {_holder(fd)}): "
                        f"wait for it to finish; the lock is {path}"
                    ) from None
                time.sleep(0.05)  # retry interval of the lock wait itself
        # Record the holder for the error message above; readers tolerate a partial write.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
