"""Engine speed: one simulation, parse excluded, median of repeated runs in one process.

Compares against the reference simulator's times on a 2-core machine (from the engine issue)
and prints the ratio. Run: `make bench` or `python benchmarks/bench_engine.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import sys

from dtrlab.sim.simulate import budget_from_ratio, simulate

from _timing import SMOKE_HELP, median_seconds, public_programs, smoke_programs  # noqa: E402  (benchmarks/ is on sys.path)

# (trace, ratio, the reference simulator's seconds for DTR on eager-optimized)
CASES = [
    ("inceptionv4", 0.5, 10.8),
    ("tv_densenet121", 0.5, 16.4),
    ("transformer", 0.5, 7.7),
    ("resnet32", 0.2, 1.37),
    ("resnet32", 0.5, 0.70),
    ("lstm", 0.15, None),
    ("lstm", 0.5, None),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    cases = CASES[:1] if args.smoke else CASES
    if args.smoke:
        args.repeat = 1
    programs = (smoke_programs if args.smoke else public_programs)(c[0] for c in cases)
    if programs is None:
        return 0
    print(f"engine benchmark ({args.engine}), median of {args.repeat} runs, DTR, eager-optimized")
    print(f"{'trace':<16}{'ratio':>6}{'median ms':>11}{'simrd s':>9}{'speed-up':>10}{'evictions':>11}")
    for name, ratio, ref_s in cases:
        program = programs[name]
        budget = budget_from_ratio(program, ratio)
        result = simulate(program, budget, "dtr", engine=args.engine)
        med = median_seconds(lambda: simulate(program, budget, "dtr", engine=args.engine), args.repeat, warm=True)
        speedup = f"{ref_s / med:.0f}x" if ref_s else "-"
        ref = f"{ref_s:.2f}" if ref_s else "-"
        print(f"{name:<16}{ratio:>6}{med * 1e3:>11.1f}{ref:>9}{speedup:>10}{result.evictions:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
