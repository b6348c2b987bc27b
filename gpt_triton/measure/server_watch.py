"""A failed window on a server that has died ends the stage; it does not fail the candidate.

A Triton that dies mid-window (a segfault, the OOM killer, a virtual-machine snapshot: on 2026-12-06 one
took the embedded python backend down with a boost::interprocess lock_exception in the middle of a
re-measure) closes its sockets, and the window fails with "Socket closed". Taken as the candidate's
failure, that failed the model being measured and every one after it in the search, and ended a re-measure
as bad input (exit 2, "do not retry"). :class:`ServerWatch` asks the server how it ended whenever a window
fails, and raises :class:`~gpt_triton.core.errors.ServerDiedError` (exit 3: a Job retries it) naming the
server's end, its log and the model being measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gpt_triton.core.errors import GptTritonError, ServerDiedError
from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.clients import LoadClient
from gpt_triton.measure.driver import WindowSample

# A dying process closes its sockets near the end of its exit (after its memory is released), so its exit
# shows within milliseconds of the client's "Socket closed"; a failed window on a live server waits this long.
EXIT_WAIT_S = 0.5


class ServerWatch(LoadClient):
    """Any load client; ``exit_note(wait_s)`` (:meth:`TritonServer.exit_note`) says how the server ended,
    or None while it lives. Asked only when a window failed (raised, or every request errored)."""

    def __init__(self, inner: LoadClient, exit_note: Callable[[float], str | None]) -> None:
        self.inner = inner
        self.name = inner.name
        self.exit_note = exit_note

    def window(self, grpc_url: str, model_name: str, requests: Sequence[dict[str, np.ndarray]], load: LoadProfile,
               duration_s: float, min_requests: int = 0, *, outputs: Sequence[str] | None = None,
               metrics_url: str | None = None, seed: int = 0, payload_start: int = 0,
               settle_s: float = 0.0) -> WindowSample:
        try:
            sample = self.inner.window(grpc_url, model_name, requests, load, duration_s, min_requests, outputs=outputs,
                                       metrics_url=metrics_url, seed=seed, payload_start=payload_start,
                                       settle_s=settle_s)
        except ServerDiedError:
            raise
        except GptTritonError as exc:
            self._stop_if_died(model_name, exc)
            raise
        if sample.result.requests > 0 and sample.result.errors == sample.result.requests:
            self._stop_if_died(model_name, None)
        return sample

    def _stop_if_died(self, model_name: str, cause: BaseException | None) -> None:
        note = self.exit_note(EXIT_WAIT_S)
        if note is not None:
            raise ServerDiedError(f"{note}, while model {model_name!r} was being measured: nothing more can be "
                                  "measured on it, so the run stops (a retry starts fresh servers)") from cause
