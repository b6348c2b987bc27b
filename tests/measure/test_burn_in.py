"""The burn-in (measure.burn_in_s): uncounted traffic round a fresh server's models before its first window."""

from __future__ import annotations

from gpt_triton.core.errors import GptTritonError
from gpt_triton.core.measurements import WindowResult
from gpt_triton.measure.burn_in import burn_in


class Clock:
    """Time that moves only when a window is sent (what the windows cost, and nothing else)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def result(requests: int) -> WindowResult:
    return WindowResult(duration_s=1.0, requests=requests, errors=0, throughput=float(requests), p50_ms=1.0,
                        p90_ms=1.0, p99_ms=1.0, mean_ms=1.0)


def test_windows_go_round_the_models_until_the_seconds_are_spent_and_the_last_is_cut() -> None:
    clock, sent = Clock(), []

    def send(cid: str, seconds: float) -> WindowResult:
        sent.append((cid, seconds))
        clock.now += seconds
        return result(int(100 * seconds))

    done = burn_in(send, ["a", "b", "c"], seconds=5.0, window_s=2.0, clock=clock)
    # a, b go whole (4 s); c gets the last second; nothing after the time is spent
    assert sent == [("a", 2.0), ("b", 2.0), ("c", 1.0)]
    assert done.seconds == 5.0 and done.requests == 500 and [c for c, _ in done.windows] == ["a", "b", "c"]
    assert done.describe(5.0 / 3) == ("burn-in: 500 requests in 3 windows over 5 s before any counted window "
                                      "(measure.burn_in_s 1.66667 per model)")
    sent.clear()
    burn_in(send, ["a", "b"], seconds=5.0, window_s=2.0, clock=clock)
    assert sent == [("a", 2.0), ("b", 2.0), ("a", 1.0)]  # round and round


def test_a_model_that_fails_sits_the_rest_out_and_is_named() -> None:
    clock, sent = Clock(), []

    def send(cid: str, seconds: float) -> WindowResult:
        sent.append(cid)
        clock.now += seconds
        if cid == "bad":
            raise GptTritonError("model bad is not ready")
        return result(10)

    done = burn_in(send, ["good", "bad"], seconds=6.0, window_s=1.0, clock=clock)
    assert sent.count("bad") == 1 and sent.count("good") == 5
    assert done.failed == {"bad": "model bad is not ready"}
    assert "bad failed and sat the rest out: model bad is not ready" in done.describe(6.0)
    # every model failing ends it at once, without spending the seconds
    clock2, calls = Clock(), []

    def broken(cid: str, seconds: float) -> WindowResult:
        calls.append(cid)
        raise GptTritonError("server gone")

    assert burn_in(broken, ["x", "y"], seconds=60.0, window_s=1.0, clock=clock2).windows == [] and calls == ["x", "y"]


def test_no_seconds_sends_nothing() -> None:
    def send(cid: str, seconds: float) -> WindowResult:
        raise AssertionError("nothing should be sent")

    done = burn_in(send, ["a"], seconds=0.0, window_s=1.0, clock=Clock())
    assert done.windows == [] and done.requests == 0
