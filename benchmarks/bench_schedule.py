"""Schedules' cost: a simulation plain and with its schedule emitted (compiled engine), the check of
that schedule, and its write and read (median of repeated calls, parse excluded), with its length.

Run: `make bench` or `python benchmarks/bench_schedule.py [--repeat N] [--smoke]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from dtrlab.schedule import check_schedule, read_schedule, write_schedule
from dtrlab.schedule.emit import simulate_schedule
from dtrlab.sim.simulate import budget_from_ratio, simulate

from _timing import SMOKE_HELP, median_seconds, public_programs, smoke_programs  # noqa: E402  (benchmarks/ is on sys.path)

# (trace, ratio): the LSTM's two regimes, ResNet-32 in and out of its OOM window, a large DenseNet run
CASES = [("lstm", 0.265), ("lstm", 0.266), ("resnet32", 0.101), ("resnet32", 0.104), ("tv_densenet121", 0.3)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    cases = CASES[:1] if args.smoke else CASES
    if args.smoke:
        args.repeat = 1
    programs = (smoke_programs if args.smoke else public_programs)(c[0] for c in cases)
    if programs is None:
        return 0
    print(f"schedule benchmark, DTR, eager-optimized, median of {args.repeat} calls (ms)")
    print(f"{'trace':<16}{'ratio':>6}{'outcome':>8}{'events':>9}{'plain':>9}{'emitted':>9}{'check':>8}"
          f"{'write':>8}{'read':>8}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.jsonl"
        for name, ratio in cases:
            program = programs[name]
            budget = budget_from_ratio(program, ratio)
            plain = median_seconds(lambda: simulate(program, budget), args.repeat, warm=True)
            emitted = median_seconds(lambda: simulate_schedule(program, budget), args.repeat, warm=True)
            result, sched = simulate_schedule(program, budget)
            check = median_seconds(lambda: check_schedule(program, sched, budget, complete=result.ok), args.repeat)
            write = median_seconds(lambda: write_schedule(sched, path), args.repeat)
            read = median_seconds(lambda: read_schedule(path), args.repeat)
            print(f"{name:<16}{ratio:>6}{result.outcome:>8}{len(sched):>9,}{plain * 1e3:>9.1f}{emitted * 1e3:>9.1f}"
                  f"{check * 1e3:>8.1f}{write * 1e3:>8.1f}{read * 1e3:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
