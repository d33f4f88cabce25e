"""Staged steps' speed: each zoo model's step with SGD (momentum 0.9) plain and staged at --ratios
(default 1.0 and 0.5; plain and staged steps taken in turns after the staged step's second plan: the
median of each, and "wall x" the median of the rounds' ratios), with DTR's
schedule or the solver's (--planner dtr|optimal|both), the staging time (trace, lower, plan, check,
rewrite) and the planned overhead beside the measured one; --stability: 20 steps at each ratio of
the study's windows, their spread.

Run: `python benchmarks/bench_staged.py [--repeat N] [--models resnet32,lstm] [--ratios 1.0,0.3]
[--planner both] [--full] [--smoke] [--stability]`; the default is the zoo's `small` sizes (under a
minute a model on a 2-core machine), --full the zoo's defaults.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import dtrlab
from dtrlab.capture.zoo import ZOO
from dtrlab.compare.world import zoo_step
from dtrlab.staged import StagingOutOfMemory

from _timing import SMOKE_HELP, median_seconds  # noqa: E402  (benchmarks/ is on sys.path)

RATIOS = (1.0, 0.5)


def interleaved(plain, staged, repeat: int) -> tuple[float, float, float]:
    """A plain and a staged step taken in turns, `repeat` rounds: the median of each (ms) and the median
    of the rounds' staged / plain ratios, so what else runs on the machine weighs on both alike."""
    pairs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plain()
        t1 = time.perf_counter()
        staged()
        t2 = time.perf_counter()
        pairs.append((t1 - t0, t2 - t1))
    return (statistics.median(a for a, _ in pairs) * 1e3, statistics.median(b for _, b in pairs) * 1e3,
            statistics.median(b / a for a, b in pairs))


def world(name: str, sizes: dict):
    return zoo_step(name, sizes)  # the step dtrlab.compare runs too: one definition


# The study's windows where the live runtime falls into two regimes by timing alone (docs/live.md):
# staged, each step is the same graph, so every step should take one time. Ratios here are of the
# staged graph's own peak (what dtrlab.stage takes), not the trace's.
STABILITY = {"resnet32": (0.325, 0.33, 0.335, 0.34, 0.345, 0.35), "lstm": (0.79, 0.795, 0.8, 0.805)}
STABILITY_STEPS = 20


def stability(models: list[str], full: bool) -> None:
    """STABILITY_STEPS staged steps at each ratio of each model's window, each after a plain one: the
    spread of their wall overheads (max / min, and how many steps sit over 1.5x the median)."""
    print(f"stability: {STABILITY_STEPS} staged steps at each ratio, each one's wall time over the plain step's before it")
    print(f"{'model':<12}{'ratio':>7}{'min x':>8}{'median x':>10}{'max x':>8}{'max/min':>9}{'>1.5 med':>10}")
    for name in models:
        if name not in STABILITY:
            continue
        sizes = {} if full else ZOO[name].small
        plain = world(name, sizes)
        plain()
        for ratio in STABILITY[name]:
            step = world(name, sizes)
            try:
                staged = dtrlab.stage(step, ratio=ratio)
                staged()
                staged()
            except StagingOutOfMemory:
                print(f"{name:<12}{ratio:>7}{'oom':>8}")
                continue
            times = []
            for _ in range(STABILITY_STEPS):  # in turns with a plain step: each step's ratio to its neighbour
                t0 = time.perf_counter()
                plain()
                t1 = time.perf_counter()
                staged()
                times.append((time.perf_counter() - t1) / (t1 - t0))
            med = statistics.median(times)
            print(f"{name:<12}{ratio:>7}{min(times):>8.2f}{med:>10.2f}{max(times):>8.2f}"
                  f"{max(times) / min(times):>9.2f}{sum(t > 1.5 * med for t in times):>10}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--full", action="store_true", help="the zoo's default sizes, not its small ones")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    ap.add_argument("--ratios", default=",".join(map(str, RATIOS)))
    ap.add_argument("--planner", default="dtr", choices=("dtr", "optimal", "both"),
                    help="who makes the schedule: DTR (the simulator), dtrlab.optimal's solver, or both side by side")
    ap.add_argument("--time-limit", type=float, default=600.0, help="the solver's time a plan (s)")
    ap.add_argument("--stability", action="store_true",
                    help=f"{STABILITY_STEPS} steps at each ratio of the study's windows (ResNet-32, LSTM) instead")
    args = ap.parse_args()
    if args.stability:
        stability(args.models.split(","), args.full)
        return 0
    ratios = tuple(float(r) for r in args.ratios.split(","))
    planners = ("dtr", "optimal") if args.planner == "both" else (args.planner,)
    if args.smoke:  # one tiny model, unbounded, one timed step
        args.models, args.repeat, ratios = next(iter(ZOO)), 1, RATIOS[:1]
    print(f"staged benchmark, DTR, eager-optimized, SGD momentum, median of {args.repeat} steps, "
          f"{torch.get_num_threads()} threads")
    print(f"{'model':<12}{'ratio':>6}{'planner':>9}{'plain ms':>10}{'staged ms':>11}{'wall x':>8}{'plan x':>8}"
          f"{'recomp':>8}{'staging s':>11}")
    for name in args.models.split(","):
        sizes = {} if args.full else (ZOO[name].tiny if args.smoke else ZOO[name].small)
        plain = world(name, sizes)
        plain()  # the optimizer's state, as the staged step's second plan has it
        plain_s = median_seconds(plain, args.repeat, warm=True)  # for the rows that do not stage
        for ratio in ratios:
            for planner in planners:
                step = world(name, sizes)
                try:
                    staged = dtrlab.stage(step, ratio=ratio, planner=planner, time_limit_s=args.time_limit)
                    staged()  # makes the optimizer's state
                    staged()  # plans again with it
                except StagingOutOfMemory:
                    print(f"{name:<12}{ratio:>6}{planner:>9}{plain_s * 1e3:>10.2f}{'oom':>11}")
                    continue
                plain_ms, staged_ms, ratio_x = interleaved(plain, staged, args.repeat)
                p = staged.plan
                print(f"{name:<12}{ratio:>6}{planner:>9}{plain_ms:>10.2f}{staged_ms:>11.2f}"
                      f"{ratio_x:>8.2f}{p.replay.overhead:>8.2f}{p.replay.n_recompute:>8}"
                      f"{p.times_ns['total_ns'] / 1e9:>11.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
