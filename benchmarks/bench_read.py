"""Trace loading speed: read + lower of the LSTM trace against a load from the program cache,
and a hostile trace whose one CALL takes one tensor N times (the time must grow linearly in N).

Median of repeated runs in one process; prints the medians and their ratios. Run: `make bench`
or `python benchmarks/bench_read.py [--repeat N] [--trace NAME] [--wide 100000,200000,850000]`.
Uses a temporary cache folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from dtrlab.sim.simulate import compute_baseline
from dtrlab.trace import load_one
from dtrlab.trace.lower import lower
from dtrlab.trace.read import open_source, read_trace

from _timing import SMOKE_HELP, TINY, TRACES, median_seconds  # noqa: E402  (benchmarks/ is on sys.path)



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--trace", default="lstm", help="first word of the log file name (default: lstm)")
    ap.add_argument("--wide", default="100000,200000,850000",
                    help="argument counts of the wide-CALL case (empty: skip it)")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:
        args.repeat, args.wide = 1, "1000"
    status = _lstm(args)
    if args.wide:
        _wide([int(n) for n in args.wide.split(",")], max(1, args.repeat // 3))
    return status


def _wide_trace(n_args: int) -> str:
    """A constant, x = g(c), r = f(x, x, ..., x) with n_args arguments, then both released."""
    import json

    rows = [{"INSTRUCTION": "CONSTANT", "NAME": "c"}, {"INSTRUCTION": "MEMORY", "NAME": "c", "MEMORY": "4"}]
    for name, fn, call_args in (("x", "g", ["c"]), ("r", "f", ["x"] * n_args)):
        rows += [{"INSTRUCTION": "CALL", "NAME": fn, "ARGS": call_args, "RESULT": [name], "TIME": "5"},
                 {"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": "8"},
                 {"INSTRUCTION": "ALIAS", "NAME": name, "ALIAS": "-1"}]
    rows += [{"INSTRUCTION": "RELEASE", "NAME": "x"}, {"INSTRUCTION": "RELEASE", "NAME": "r"}]
    return "\n".join(json.dumps(r) for r in rows) + "\n"


def _wide(counts: list[int], repeat: int) -> None:
    """What `trace info` does on the wide CALL: read, lower, and the baseline (banishing) run."""
    print(f"one CALL with N uses of one tensor: read + lower + baseline, median of {repeat} runs")
    first = None
    with tempfile.TemporaryDirectory() as folder:
        for n in counts:
            path = Path(folder) / f"wide-{n}.jsonl"
            path.write_text(_wide_trace(n))
            seconds = median_seconds(lambda: compute_baseline(load_one(path, cache=False)), repeat)
            first = first or (n, seconds)
            print(f"  N = {n:>9,}  {seconds:8.2f} s   per use {seconds / n * 1e6:6.2f} us   "
                  f"x{seconds / first[1]:5.1f} the time for {first[0]:,} ({n / first[0]:.1f}x the uses)")


def _lstm(args) -> int:
    logs = [TINY] if args.smoke else sorted(TRACES.glob(f"{args.trace}-*.log"))
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
