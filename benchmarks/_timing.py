"""Shared by the benchmarks: where the public traces are, loading them, and the median of repeated calls."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

SHARED = Path(os.environ.get("DTRLAB_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TRACES = SHARED / "traces" / "dtr-iclr21"


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
