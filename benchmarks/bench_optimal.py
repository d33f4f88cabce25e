"""Speed of the optimal solver: the solve time of each trace and budget, and the LP bound's time alone.

Writes one JSON object a line (to --out, or stdout): a solve's result (best found, bound, gap, status,
DTR's overhead at the same budget) or the LP bound alone. `--smoke` runs the smallest size (a 12-operator
generated program) in seconds. Run by hand, one process at a time; give each solve a time limit.

    PYTHONPATH=src python benchmarks/bench_optimal.py --smoke
    PYTHONPATH=src python benchmarks/bench_optimal.py /path/to/dtr-iclr21 --trace resnet32 \
        --ratios 0.1,0.5,0.9 --time-limit 150 --out resnet32.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from decimal import Decimal


def _ratios(text: str) -> list[str]:
    """"0.1,0.2" or "0.1:0.9:0.1" (start:stop:step, inclusive), kept as exact decimal strings."""
    if ":" in text:
        start, stop, step = (Decimal(x) for x in text.split(":"))
        out, r = [], start
        while r <= stop:
            out.append(str(r))
            r += step
        return out
    return [x.strip() for x in text.split(",") if x.strip()]


def _clean(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", nargs="?", help="trace file or folder")
    ap.add_argument("--trace", action="append", default=[], help="trace name prefix (repeatable)")
    ap.add_argument("--ratios", default="0.1:0.9:0.1")
    ap.add_argument("--time-limit", type=float, default=150.0, help="seconds per solve")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lp-only", action="store_true", help="time the LP bound alone")
    ap.add_argument("--bound-only", action="store_true", help="the crossing bound alone, DTR beside it")
    ap.add_argument("--min-budget", action="store_true",
                    help="also the least budget: the proven floor, the least with a schedule found, DTR's")
    ap.add_argument("--smoke", action="store_true", help="a 12-operator generated program, in seconds")
    ap.add_argument("--out", help="append JSON lines here (default: stdout)")
    args = ap.parse_args(argv)

    from dtrlab.optimal.least import least_budget
    from dtrlab.optimal.solve import crossing_bound, lp_bound, solve_optimal
    from dtrlab.sim.simulate import budget_from_ratio

    if args.smoke:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "optimal"))
        from brute import small_program

        programs = [small_program(7, 12)]
    else:
        from dtrlab.trace import load_one

        programs = [load_one(args.source, name) for name in args.trace]
    out = open(args.out, "a") if args.out else sys.stdout
    for program in programs:
        if args.min_budget:
            row = {"kind": "least-budget", **least_budget(program).to_dict()}
            print(json.dumps(row), file=out, flush=True)
        for ratio in _ratios(args.ratios):
            budget = budget_from_ratio(program, ratio)
            if args.lp_only:
                result = lp_bound(program, budget, args.time_limit, args.threads)
            elif args.bound_only:
                result = crossing_bound(program, budget)
            else:
                result = solve_optimal(program, budget, time_limit_s=args.time_limit, threads=args.threads,
                                       lp_bound=False)
            row = {"ratio": ratio, **_clean(result.to_dict())}
            print(json.dumps(row), file=out, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
