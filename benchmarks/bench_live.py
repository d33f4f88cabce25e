"""The live runtime's machinery: a zoo model's training step under a LiveSession against the plain step.

At an unbounded budget (nothing evicted: naming, lowering, the engine's bookkeeping, recipes and
wrappers only), unplanned and following the step's capture (planned); then at ratio 0.5 of the
plan's peak on the logical clock, the wall time's ratio to a plain step beside the overhead the
simulation of the plan predicts (clock / compute) for the same decisions.

Medians of repeated steps in one process, one thread. Run: `make bench` or
`python benchmarks/bench_live.py [--repeat N] [--models resnet32,lstm] [--tiny]` (--tiny: the test
sizes; default: the sizes the zoo's traces ship at, capture/ship.py). Needs torch (the capture extra).
"""

from __future__ import annotations

import argparse
import sys

from _timing import median_seconds  # noqa: E402  (benchmarks/ is on sys.path)

RATIO = 0.5


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default="", help="comma-separated zoo models (default: all)")
    ap.add_argument("--tiny", action="store_true", help="the tests' sizes instead of the shipped ones")
    args = ap.parse_args()
    try:
        import torch
    except ModuleNotFoundError:
        print("skipped: torch is not installed (pip install -e '.[capture]')")
        return 0
    from dtrlab.capture.recorder import record
    from dtrlab.capture.save import to_program
    from dtrlab.capture.ship import SHIPPED_SIZES
    from dtrlab.capture.zoo import ZOO
    from dtrlab.live.runs import live_step, simulate_plan
    from dtrlab.live.session import LiveSession
    from dtrlab.sim.simulate import budget_from_ratio

    torch.set_num_threads(1)
    names = [n for n in args.models.split(",") if n] or list(ZOO)
    print(f"{'model':12} {'ops':>6} {'plain s':>9} {'unplanned':>10} {'planned':>9}   at {RATIO}: {'outcome':>7} "
          f"{'wall ratio':>10} {'predicted':>9}  (median of {args.repeat}, {'tiny' if args.tiny else 'shipped'} sizes)")
    for name in names:
        torch.manual_seed(0)
        step = ZOO[name].make(**(ZOO[name].tiny if args.tiny else SHIPPED_SIZES[name]))
        step()
        capture = record(step)
        plain = median_seconds(step, args.repeat, warm=True)

        def live(plan=None) -> None:
            with LiveSession(plan=plan):
                step()

        unplanned = median_seconds(live, args.repeat, warm=True)
        planned = median_seconds(lambda: live(capture.instructions), args.repeat, warm=True)
        program = to_program(capture, name)
        budget = budget_from_ratio(program, RATIO)
        run = live_step(step, budget, "dtr", "logical", 0, "cpu", capture.instructions)
        sim = simulate_plan(program, budget, "dtr", 0)
        predicted = f"{sim.overhead:9.3f}" if sim.overhead else f"{'oom':>9}"
        print(f"{name:12} {capture.operators:6d} {plain:9.4f} {unplanned / plain:9.2f}x {planned / plain:8.2f}x   "
              f"at {RATIO}: {run.outcome:>7} {run.wall_s / plain:9.2f}x {predicted}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
