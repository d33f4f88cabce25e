"""Shared timing for the benchmarks: the median of repeated calls, in seconds."""

from __future__ import annotations

import statistics
import time


def median_seconds(fn, repeat: int, warm: bool = False) -> float:
    if warm:
        fn()  # builds what is built once (derived arrays, caches) outside the timing
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
