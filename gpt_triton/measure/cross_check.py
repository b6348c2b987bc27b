"""The cross-check's figures (``measure.cross_check``): the other client's gain for the re-measure's pair,
formed as the tuner forms its own, beside the tuner's from the same server and minutes
(:class:`gpt_triton.core.cross_check.ClientCrossCheck`). Pure: the stage that runs the other client is in
gpt_triton/remeasure_step.py."""

from __future__ import annotations

from typing import cast

import numpy as np

from gpt_triton.core.cross_check import ClientCrossCheck, agreement_interval
from gpt_triton.core.measurements import Interval
from gpt_triton.core.spec import GainStatistic
from gpt_triton.measure.paired import pair_ratio_interval
from gpt_triton.measure.runs import RemeasureResult
from gpt_triton.measure.stats import Statistic


def client_cross_check(tuner: tuple[RemeasureResult, RemeasureResult], other: tuple[RemeasureResult, RemeasureResult],
                       metric: str, statistic: GainStatistic, clients: tuple[str, str], version: str = "",
                       level: float = 0.95, resamples: int = 2000, seed: int = 0) -> ClientCrossCheck:
    """``tuner`` and ``other`` = (baseline, winner) as each client measured them; ``clients`` = (the tuner's
    client, the other). Both gains are formed the same way (``statistic``, ``metric``), so that what
    separates them is the clients and their samples, not the formula."""
    def gain(pair: tuple[RemeasureResult, RemeasureResult], stat: str = metric) -> Interval:
        return pair_ratio_interval(pair[0].window_latencies_ms, pair[1].window_latencies_ms, cast(Statistic, stat),
                                   statistic, level, resamples, seed)

    tuner_ratio, other_ratio = gain(tuner), gain(other)
    agreement, z = agreement_interval(tuner_ratio, other_ratio)
    p50_agreement = None if metric == "p50" else agreement_interval(gain(tuner, "p50"), gain(other, "p50"))[0]
    p50 = {side: float(np.median(tuner[k].latencies_ms) / np.median(other[k].latencies_ms))
           for k, side in enumerate(("baseline", "winner"))}
    return ClientCrossCheck(client=clients[1], version=version, tuner_client=clients[0], ratio=other_ratio,
                            tuner_ratio=tuner_ratio, agreement=agreement, z=z,
                            windows=min(len(side.samples) for side in other),
                            requests=sum(int(side.latencies_ms.size) for side in other), p50_ratio=p50,
                            p50_agreement=p50_agreement)
