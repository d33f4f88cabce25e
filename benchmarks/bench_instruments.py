"""Instruments' cost: one simulation without instruments, with the event log, and with every
instrument, on the compiled engine (median of repeated runs, parse excluded), and the log's size.

Run: `make bench` or `python benchmarks/bench_instruments.py [--repeat N] [--python]` (--python
adds the Python engine with the log, once per case: minutes on the LSTM).
"""

from __future__ import annotations

import argparse
import sys
import time

from dtrlab.sim.instruments import Instruments
from dtrlab.sim.simulate import budget_from_ratio, simulate

from _timing import SMOKE_HELP, median_seconds, public_programs, smoke_programs  # noqa: E402  (benchmarks/ is on sys.path)

# (trace, ratio): the LSTM on both sides of its regime switch, and ResNet-32 at an OOM and a run
CASES = [("lstm", 0.265), ("lstm", 0.266), ("resnet32", 0.104), ("resnet32", 0.2), ("transformer", 0.5)]
EVENTS = Instruments(per_storage=False, events=True, oom_snapshot=False)
EVERY = Instruments(per_storage=True, memory_series=True, events=True, oom_snapshot=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--python", action="store_true", help="also time the Python engine with the log, once")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    cases = CASES[:1] if args.smoke else CASES
    if args.smoke:
        args.repeat = 1
    programs = (smoke_programs if args.smoke else public_programs)(c[0] for c in cases)
    if programs is None:
        return 0
    print(f"instruments benchmark, compiled engine, DTR, eager-optimized, median of {args.repeat} runs")
    print(f"{'trace':<12}{'ratio':>6}{'plain ms':>10}{'events ms':>11}{'every ms':>10}{'ratio':>7}"
          f"{'events':>10}{'log MB':>8}{'python s':>10}")
    for name, ratio in cases:
        program = programs[name]
        budget = budget_from_ratio(program, ratio)
        runs = [median_seconds(lambda ins=ins: simulate(program, budget, "dtr", instruments=ins), args.repeat,
                               warm=True) for ins in (None, EVENTS, EVERY)]
        log = simulate(program, budget, "dtr", instruments=EVENTS).observations.events
        mb = sum(col.nbytes for col in log.columns().values()) / 1e6
        py = "-"
        if args.python:
            t0 = time.perf_counter()
            simulate(program, budget, "dtr", instruments=EVENTS, engine="python")
            py = f"{time.perf_counter() - t0:.1f}"
        print(f"{name:<12}{ratio:>6}{runs[0] * 1e3:>10.1f}{runs[1] * 1e3:>11.1f}{runs[2] * 1e3:>10.1f}"
              f"{runs[1] / runs[0]:>7.2f}{len(log):>10,}{mb:>8.1f}{py:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
