"""Another tenant on the machine, for tests and benchmarks of :mod:`gpt_triton.measure.machine_load`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress

# Forks, and the child leaves: the grandchild is nobody's descendant here, as another tenant's process
# is not, and spins on a core until it is killed, or for LIFETIME_S at most, so that a test run killed
# before its cleanup does not leave a core spinning for good.
LIFETIME_S = 300
_OUTSIDER = ("import os, time\nif os.fork():\n    os._exit(0)\nos.setsid()\nprint(os.getpid(), flush=True)\n"
             f"end = time.monotonic() + {LIFETIME_S}\nwhile time.monotonic() < end:\n    pass\n")


@contextmanager
def co_tenant(cores: int = 1) -> Iterator[list[int]]:
    """``cores`` processes spinning outside this process's tree while the block runs; their pids."""
    pids: list[int] = []
    try:
        for _ in range(cores):
            with subprocess.Popen([sys.executable, "-c", _OUTSIDER], stdout=subprocess.PIPE, text=True) as started:
                assert started.stdout is not None
                pids.append(int(started.stdout.readline()))  # printed once on its own, just before it spins
        yield pids
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):  # gone already
                os.kill(pid, signal.SIGKILL)
