"""Number and knob formatting shared by the view model's text (verdict lines) and every renderer.

Plain strings only: the terminal, report.md and the plot labels print the same figure the same way.
"""

from __future__ import annotations

import math
from typing import Any

from gpt_triton.core.measurements import Interval
from gpt_triton.core.routes import Route


def fmt_ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    # Fixed decimals per magnitude (not %g): an interval's ends then line up with its value.
    decimals = 3 if abs(value) < 1 else 2 if abs(value) < 10 else 1 if abs(value) < 1000 else 0
    return f"{value:.{decimals}f}"


def fmt_interval(interval: Interval | None) -> str:
    if interval is None:
        return "-"
    # No space inside the brackets: a narrow terminal then wraps the whole interval under its value.
    return f"{fmt_ms(interval.value)} [{fmt_ms(interval.low)}–{fmt_ms(interval.high)}]"


def fmt_count(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def fmt_ratio(value: float | None) -> str:
    """A ">1 is better" ratio as ``1.23x``; ``-`` when there is none (or it is zero)."""
    return f"{value:.2f}x" if value else "-"


def fmt_ratio_interval(interval: Interval | None) -> str:
    """A gain or a ratio of gains with its interval, to three decimals (``-`` when there is none)."""
    return "-" if interval is None else f"{interval.value:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def knob_text(knobs: dict[str, Any]) -> str:
    """Knobs spelled as a route key spells them (``-level=all -quant=u8s8``), without the family."""
    return Route(family="_", knobs=knobs).key().split(":", 1)[1].strip()


def truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
