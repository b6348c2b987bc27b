"""CPU of a tune's process tree, per process and thread name, every few seconds, until the tune ends.

    python benchmarks/process_cpu_monitor.py PID OUT [--every-s 5]

PID is the ``gpt-triton tune`` process; OUT gets one line per interval: the UTC time, each (pid, process,
thread name) that used at least 0.02 cores over it, and each process's thread count. It reads only
``/proc/<pid>/task/*/stat`` (about 0.01 cores). The M1-M6 tunes of 2026-12-06 ran beside it
(benchmarks/results/estimate_conv_2026-12-06.txt): their figures of this run's CPU per request in the
finalist pair's and the re-measure's stages come from its lines over each stage's window times; tunes
since then record the same per window themselves (``own_cpu_ms`` in windows.csv).
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
Key = tuple[int, str, int, str]  # pid, process name, thread id, thread name


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/<pid>/task/<pid>/children)."""
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return pids
    for child in children:
        pids += tree(int(child))
    return pids


def sample(root: int) -> dict[Key, float]:
    """CPU seconds (user + system) of every thread of the tree."""
    out: dict[Key, float] = {}
    for pid in tree(root):
        try:
            process = Path(f"/proc/{pid}/comm").read_text().strip()
            for tid in os.listdir(f"/proc/{pid}/task"):
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                name = stat[stat.index("(") + 1:stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2:].split()
                out[(pid, process, int(tid), name)] = (int(fields[11]) + int(fields[12])) / TICKS
        except (OSError, ValueError):
            continue  # it ended between the listing and the read
    return out


def line(before: dict[Key, float], after: dict[Key, float], wall_s: float) -> str:
    used: dict[tuple[int, str, str], float] = {}
    threads: Counter[tuple[int, str]] = Counter()
    for key, seconds in after.items():
        pid, process, _, name = key
        used[(pid, process, name)] = used.get((pid, process, name), 0.0) + seconds - before.get(key, 0.0)
        threads[(pid, process)] += 1
    busy = " | ".join(f"{pid}:{process}/{name}={s / wall_s:.2f}"
                      for (pid, process, name), s in sorted(used.items(), key=lambda kv: -kv[1])
                      if s / wall_s >= 0.02)
    counts = " ".join(f"{pid}:{process}={n}" for (pid, process), n in threads.items())
    return f"{datetime.now(timezone.utc):%H:%M:%S} {busy}  threads {counts}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pid", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("--every-s", type=float, default=5.0)
    args = parser.parse_args()
    before, at = sample(args.pid), time.monotonic()
    with args.out.open("w") as out:
        while Path(f"/proc/{args.pid}").exists():
            time.sleep(args.every_s)  # the sampling interval itself, not a synchronisation
            after, now = sample(args.pid), time.monotonic()
            out.write(line(before, after, now - at) + "\n")
            out.flush()
            before, at = after, now


if __name__ == "__main__":
    main()
