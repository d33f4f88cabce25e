"""How high can the stage model's bound go? A probe, not a benchmark (`make bench` does not run it).

The bound `dtrlab optimal` proves is the branch and bound's on the first stage model, which holds memory
at stage boundaries only (docs/optimal.md, "The formulation"). However long the branch and bound runs,
that bound cannot pass the model's own integer optimum, and any solution of the model is a ceiling on
it. This probe looks for cheap solutions: it starts from the portfolio's best schedule, polishes it
(polish.py: a real schedule), then searches windows of consecutive stages of the first
model alone (boundary rows, every other column held), as polish.py does with exact rows. What it finds
need not be a schedule: it says how many stages cross the budget when read as one.

One JSON object a line per budget: the start's, the polished schedule's and the boundary solution's
overheads, and the stages that solution crosses the budget at (with the largest share of it).

    PYTHONPATH=src python benchmarks/probe_boundary_ceiling.py /path/to/dtr-iclr21 --trace resnet32 \
        --ratios 0.1,0.2 --polish-s 200 --search-s 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def _boundary_search(m, stages: np.ndarray, x: np.ndarray, width: int, window_s: float, until: float):
    """Windows of `width` stages of the first model, the rest held, solved for a cheaper solution, in
    sweeps until one improves nothing or `until`: the R and S columns of the cheapest solution found."""
    from dtrlab.optimal.polish import improve_window

    improved = True
    while improved and time.perf_counter() < until:
        improved = False
        for a in range(0, int(stages.max()) + 1, width // 2):
            left = until - time.perf_counter()
            if left < 1.0:
                break
            found, _status = improve_window(m, stages, x, a, a + width, min(window_s, left))
            if found is not None:
                x, improved = found, True
    return x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", nargs="?", help="trace file or folder")
    ap.add_argument("--trace")
    ap.add_argument("--ratios", default="0.1")
    ap.add_argument("--polish-s", type=float, default=200.0, help="seconds of polishing (polish.py)")
    ap.add_argument("--search-s", type=float, default=200.0, help="seconds of search in the first model")
    ap.add_argument("--width", type=int, default=30, help="stages a window of the search")
    ap.add_argument("--window-s", type=float, default=10.0, help="seconds a window of the search")
    ap.add_argument("--smoke", action="store_true", help="a small generated recurrence, in seconds")
    args = ap.parse_args(argv)
    if not args.smoke and not (args.source and args.trace):
        ap.error("give SOURCE and --trace, or --smoke")

    from dtrlab.optimal.graph import item_graph
    from dtrlab.optimal.model import build_milp
    from dtrlab.optimal.polish import column_stages, polish
    from dtrlab.optimal.read import over_budget, schedule_from_solution
    from dtrlab.optimal.solve import overhead_of, portfolio_best
    from dtrlab.optimal.warm import start_of_schedule
    from dtrlab.sim.simulate import budget_from_ratio
    from dtrlab.trace import load_one

    if args.smoke:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "optimal"))
        from brute import rnn_program

        from dtrlab.optimal.solve import min_budget_bytes

        program = rnn_program(3, 5)  # a small recurrence, at a quarter and half of the way from its floor
        low, high = min_budget_bytes(program), budget_from_ratio(program, 1.0)
        args.ratios = ",".join(str((low + (high - low) * q) / high) for q in (0.25, 0.5))
        args.polish_s, args.search_s, args.width = 5.0, 5.0, 4
    else:
        program = load_one(args.source, args.trace)
    g = item_graph(program)
    for ratio in (float(r) for r in args.ratios.split(",")):
        budget = budget_from_ratio(program, ratio)
        m = build_milp(g, budget)
        stages = column_stages(m)
        n = len(stages)
        cost = m.col_cost[:n].astype(float)
        _dtr, best = portfolio_best(program, budget)
        row = {"trace": program.name, "ratio": ratio}
        if best is None or m.infeasible is not None:
            print(json.dumps({**row, "start": None}), flush=True)  # nothing to start from
            continue
        x = start_of_schedule(program, g, m, best[1])[:n].round()
        row["start"] = overhead_of(program, cost @ x)
        if not over_budget(schedule_from_solution(program, g, m, x, "probe", budget)[1], budget):
            x = polish(program, g, m, budget, x, time.perf_counter() + args.polish_s).x
        row["polished"] = overhead_of(program, cost @ x)
        x = _boundary_search(m, stages, x, args.width, args.window_s, time.perf_counter() + args.search_s)
        row["boundary_solution"] = overhead_of(program, cost @ x)
        peaks = np.array(schedule_from_solution(program, g, m, x, "probe", budget)[1]) / budget
        row["stages_over"] = int((peaks > 1).sum())
        row["most_over"] = round(float(peaks.max()), 3)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
