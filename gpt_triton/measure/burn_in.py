"""The burn-in: traffic a fresh server serves before its first counted window (``measure.burn_in_s``).

In a fresh embedded Triton the selected conv_attention candidate ran faster in its first stretch of
traffic than in its steady state: the pair's p99 ratio was about 1.67 in the first minute of alternating
traffic and about 1.3 after it. A server left idle for 90 s first started just as high, and so did the
model after 75 s of traffic to the other model alone: what settles a model is its own traffic, not the
server's clock or its other models' (benchmarks/server_age.py, docs/measurement.md). A gain measured
inside that stretch describes a young server, not the one production keeps running. The burn-in sends
that traffic first, alternating over the server's models in windows at the objective's load, the same
seconds for each, and counts none of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpt_triton.core.errors import GptTritonError, ServerDiedError
from gpt_triton.core.measurements import WindowResult

# One uncounted window: (candidate id, seconds) -> the window's figures; raises GptTritonError when it fails.
SendWindow = Callable[[str, float], WindowResult]


@dataclass
class BurnIn:
    """What a burn-in sent: every window in order as (candidate id, figures), and who failed and why."""

    seconds: float
    windows: list[tuple[str, WindowResult]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return sum(result.requests for _, result in self.windows)

    def describe(self, per_model_s: float) -> str:
        failed = "".join(f"; {cid} failed and sat the rest out: {why}" for cid, why in self.failed.items())
        return (f"burn-in: {self.requests} requests in {len(self.windows)} windows over {self.seconds:.0f} s "
                f"before any counted window (measure.burn_in_s {per_model_s:g} per model){failed}")


def burn_in(send: SendWindow, candidates: Sequence[str], seconds: float, window_s: float,
            clock: Callable[[], float] = time.monotonic) -> BurnIn:
    """Windows of at most ``window_s`` going round ``candidates`` (ids) until ``seconds``
    have passed; the last ones are cut to what is left, so it costs what it says. A model whose window
    fails sits the rest out (its counted windows then fail and say why); nothing is sent when
    ``seconds`` is 0."""
    began = clock()
    done = BurnIn(seconds=0.0)
    live = list(dict.fromkeys(candidates))
    while live and (left := seconds - (clock() - began)) > 0:
        for cid in list(live):
            try:
                done.windows.append((cid, send(cid, min(window_s, max(left, 0.1)))))
            except ServerDiedError:
                raise  # not the model's failure: nothing more runs on that server
            except GptTritonError as exc:
                done.failed[cid] = str(exc)
                live.remove(cid)
            left = seconds - (clock() - began)
            if left <= 0:
                break
    done.seconds = clock() - began
    return done
