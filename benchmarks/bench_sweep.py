"""Sweep throughput: one trace over a fine ratio grid on an executor, into a fresh store.

Prints the wall time and runs per second. Run by hand:
    PYTHONPATH=src python benchmarks/bench_sweep.py                      # lstm, 0.100:1.000:0.001 (901 runs)
    PYTHONPATH=src python benchmarks/bench_sweep.py --overhead-limit 3   # the same, thrashing runs cut short
    PYTHONPATH=src python benchmarks/bench_sweep.py --trace resnet32 --ratios 0.1:1.0:0.05
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dtrlab.sweep.executors import default_workers  # noqa: E402
from dtrlab.sweep.grid import build_specs, parse_ratios  # noqa: E402
from dtrlab.sweep.run import run_sweep  # noqa: E402
from dtrlab.sweep.store import results_dataframe  # noqa: E402
from dtrlab.trace import load  # noqa: E402

from _timing import TINY  # noqa: E402  (benchmarks/ is on sys.path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=os.environ.get(
        "DTRLAB_TRACES", str(REPO.parent / "shared" / "traces" / "dtr-iclr21")))
    parser.add_argument("--trace", default="lstm")
    parser.add_argument("--ratios", default="0.100:1.000:0.001")
    parser.add_argument("--policy", default="dtr")
    parser.add_argument("--runtime", default="eager-optimized")
    parser.add_argument("--executor", default="local")
    parser.add_argument("--workers", type=int, default=None, help="default: one a core")
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--overhead-limit", type=float, default=None,
                        help="stop runs past this overhead (lstm has budgets near 0.2 with 30-40x)")
    parser.add_argument("--timeout", type=float, default=None, help="per-run limit in seconds")
    parser.add_argument("--store", default=None, help="default: a fresh temporary file (nothing skipped)")
    parser.add_argument("--smoke", action="store_true", help="a few runs on the shipped tiny trace (CI: it must run)")
    args = parser.parse_args()
    if args.smoke:
        args.source, args.trace, args.ratios, args.workers = str(TINY), "tiny", "0.5:1.0:0.1", 1

    t0 = time.perf_counter()
    programs = [p for p in load(args.source, [args.trace]) if p.name == args.trace]
    specs = build_specs(args.source, programs, [args.policy], [args.runtime], parse_ratios(args.ratios),
                        overhead_limit=args.overhead_limit, engine=args.engine)
    plan_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or str(Path(tmp) / "bench.duckdb")
        summary = run_sweep(specs, store, executor=args.executor, workers=args.workers,
                            timeout_s=args.timeout, progress=sys.stderr.isatty(), report=False)
        frame = results_dataframe(store)
    ran = frame[frame["key"].isin({s.key for s in specs})]
    per_run = ran["wall_s"].tolist()
    workers = args.workers or default_workers()
    print(f"trace {args.trace}, {len(specs)} runs ({args.ratios}), policy {args.policy}, "
          f"runtime {args.runtime}, {args.executor} executor, {workers} workers, "
          f"engine {','.join(sorted(set(ran['engine'].dropna())))}")
    print(f"outcomes: {ran['outcome'].value_counts().to_dict()}")
    print(f"planning (load + baseline): {plan_s:.2f} s; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores at the end")
    print(f"sweep wall time: {summary.wall_s:.2f} s for {summary.ran} runs = {summary.runs_per_s:.1f} runs/s")
    if per_run:
        print(f"per run (inside a worker): median {statistics.median(per_run) * 1e3:.1f} ms, "
              f"max {max(per_run) * 1e3:.1f} ms, sum {sum(per_run):.2f} s "
              f"(parallel efficiency {sum(per_run) / (summary.wall_s * workers):.0%})")


if __name__ == "__main__":
    main()
