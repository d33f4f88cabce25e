"""Shared by the benchmarks: where the public traces are, loading them, and the median of repeated calls."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

SHARED = Path(os.environ.get("DTRLAB_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TRACES = SHARED / "traces" / "dtr-iclr21"


TINY = Path(__file__).resolve().parents[1] / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"
SMOKE_HELP = "one quick pass on the shipped tiny trace (CI: every benchmark must run; timings mean nothing)"


def smoke_programs(names) -> dict:
    """The shipped tiny trace's program under each name: a smoke run's stand-in for the public traces."""
    from dtrlab.trace import load_one

    program = load_one(TINY, cache=False)
    return {name: program for name in names}


def public_programs(names) -> dict | None:
    """The named public traces' programs by name; None (after saying so) when the traces are absent."""
    if not TRACES.is_dir():
        print(f"skipped: the public traces are not at {TRACES}")
        return None
    from dtrlab.trace import load

    return {p.name: p for p in load(TRACES, sorted(set(names)))}


def median_seconds(fn, repeat: int, warm: bool = False) -> float:
    if warm:
        fn()  # builds what is built once (derived arrays, caches) outside the timing
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
