"""Trace loading speed: read + lower of the LSTM trace against a load from the program cache.

Median of repeated runs in one process; prints both medians and their ratio. Run: `make bench`
or `python benchmarks/bench_read.py [--repeat N] [--trace NAME]`. Uses a temporary cache folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from dtrlab.trace import load_one
from dtrlab.trace.lower import lower
from dtrlab.trace.read import open_source, read_trace

from _timing import median_seconds  # noqa: E402  (benchmarks/ is on sys.path)

SHARED = Path(os.environ.get("DTRLAB_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TRACES = SHARED / "traces" / "dtr-iclr21"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--trace", default="lstm", help="first word of the log file name (default: lstm)")
    args = ap.parse_args()
    logs = sorted(TRACES.glob(f"{args.trace}-*.log"))
    if not logs:
        print(f"skipped: no {args.trace}-*.log in {TRACES}")
        return 0
    path = logs[0]
    lines = path.read_bytes().count(b"\n")
    (source,) = open_source(path)

    with tempfile.TemporaryDirectory() as cache:
        # A private cache folder: the benchmark neither reads nor fills the user's cache.
        os.environ["DTRLAB_CACHE_DIR"] = cache
        read_s = median_seconds(lambda: read_trace(source), args.repeat)
        text = read_trace(source)
        lower_s = median_seconds(lambda: lower(text), args.repeat)
        uncached_s = median_seconds(lambda: load_one(path, cache=False), args.repeat)
        t0 = time.perf_counter()
        first = load_one(path)  # the miss: read, lower, baseline, write
        miss_s = time.perf_counter() - t0
        assert first.meta["cache"] == "miss"
        cached_s = median_seconds(lambda: load_one(path), args.repeat)
        assert load_one(path).meta["cache"] == "hit"

    print(f"trace loading, {path.name} ({lines:,} lines, {path.stat().st_size / 2**20:.1f} MiB), "
          f"median of {args.repeat} runs")
    print(f"  read (parse + validate)    {read_s * 1e3:9.1f} ms")
    print(f"  lower                      {lower_s * 1e3:9.1f} ms")
    print(f"  read + lower (no cache)    {uncached_s * 1e3:9.1f} ms")
    print(f"  first cached load (miss)   {miss_s * 1e3:9.1f} ms  (one run: read, lower, baseline, write)")
    print(f"  cached load (hit)          {cached_s * 1e3:9.1f} ms")
    print(f"  ratio read+lower / cached  {uncached_s / cached_s:9.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
