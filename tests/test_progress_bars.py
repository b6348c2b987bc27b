"""The terminal's progress bars redraw with the steps, not with a clock: a refresh thread would take the
interpreter lock inside the windows the in-process client times (benchmarks/progress_bar_tail.py)."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from gpt_triton.pipeline_cli import RichProgress


def _refresh_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__name__ == "_RefreshThread"]


def test_terminal_bars_run_no_refresh_thread_and_redraw_on_each_step_and_log_line() -> None:
    stream = io.StringIO()
    progress = RichProgress(Console(file=stream, force_terminal=True, width=160))
    with progress.bar("measuring 2 candidates (windows)", None) as advance:
        assert _refresh_threads() == []  # nothing wakes up between steps
        assert "measuring 2 candidates" in stream.getvalue()  # drawn when it opens
        advance("1c1b5f0a9e2d concurrency=1 window 1: p50 1.1 ms")
        assert "window 1: p50 1.1 ms" in stream.getvalue()  # ... and when a step ends
        assert _refresh_threads() == []
        before = len(stream.getvalue())
        progress.log("finalists: a decision line")
        after = stream.getvalue()[before:]
        # the line goes above the bars, which are drawn again below it
        assert "finalists: a decision line" in after
        assert "measuring 2 candidates" in after.split("finalists: a decision line", 1)[1]
    assert _refresh_threads() == []
