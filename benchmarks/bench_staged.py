"""Staged steps' speed: each zoo model's step with SGD (momentum 0.9) plain and staged at --ratios
(default 1.0 and 0.5; plain and staged steps taken in turns after the staged step's second plan: the
median of each, and "wall x" the median of the rounds' ratios), with DTR's
schedule or the solver's (--planner dtr|optimal|both), the staging time (trace, lower, plan, check,
rewrite, both plans and, with --backend inductor, the compilation) and the planned overhead beside the
measured one (inductor: also the allocator's peak and how close one step from the plain step's state
is to it); --stability: 20 steps at each ratio of
the study's windows on the live runtime's step at the shipped sizes, their spread, and one live step
beside each.

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


def closeness(plain, staged) -> float:
    """One step of each from the plain step's state (copied into the staged step's): the largest
    difference of the state after, over its largest value (staged.inductor.max_relative_difference)."""
    from dtrlab.staged.graph import find_holders, lifted_state
    from dtrlab.staged.inductor import max_relative_difference

    with torch.no_grad():
        for mine, theirs in zip(lifted_state(staged.holders), lifted_state(find_holders(plain))):
            mine.copy_(theirs)
    plain()
    staged()
    return max_relative_difference(lifted_state(find_holders(plain)), lifted_state(staged.holders))


# The study's windows where the live runtime falls into two regimes by timing alone (docs/live.md,
# "twenty measured steps a ratio"): staged, each step is the same graph, so every step should take one
# time. The step is the one the live runtime ran there: the zoo's step (forward and backward, no
# update) at the shipped traces' sizes, on one thread; the budget is the ratio's of the step's own
# capture, in bytes, for both runtimes (the staged graph's peak is the capture's within 64 bytes).
# The staged LSTM graph (2,121 aten operators, its peak 1.7% over the capture's) runs out of memory
# through the study's window and has a switch window of its own, at 0.885-0.905 of the capture's peak
# (where its measured costs put it: thrashing at 40-60x below, about 1.2x above): run there too.
STABILITY = {"resnet32": (0.325, 0.33, 0.335, 0.34, 0.345, 0.35),
             "lstm": (0.79, 0.795, 0.8, 0.805, 0.885, 0.89, 0.895, 0.9, 0.905)}
STABILITY_STEPS = 20


def study_step(name: str, seed: int = 0):
    """`name`'s zoo step at its shipped size as `dtrlab run` runs it (no optimizer), weights from `seed`."""
    from dtrlab.capture.ship import SHIPPED_SIZES

    torch.manual_seed(seed)
    return ZOO[name].make(**SHIPPED_SIZES[name])


def stability(models: list[str], steps: int) -> None:
    """`steps` staged steps at each ratio of each model's window, in turns with plain ones: the spread of
    their wall overheads over the median plain step (max / min, and how many steps sit over 1.5x the
    median) beside the plan's.
    Then one live step (compiled engine, logical clock: the simulation's decisions) at the same budget in
    bytes, the ratio's of the step's capture, and how many staged steps pay for the staging against it."""
    from dtrlab.capture.recorder import record
    from dtrlab.live.runs import live_step
    from dtrlab.live.session import make_plan
    from dtrlab.capture.ship import SHIPPED_THREADS
    from dtrlab.sim.simulate import budget_from_ratio

    torch.set_num_threads(SHIPPED_THREADS)  # as the live runtime's study ran
    print(f"stability: {steps} staged steps at each ratio, each one's wall time over the median plain step's; "
          "one live step at the same bytes")
    print(f"{'model':<12}{'ratio':>7}{'plan x':>8}{'recomp':>8}{'min x':>8}{'median x':>10}{'max x':>8}"
          f"{'max/min':>9}{'>1.5 med':>10}{'staging s':>11}{'live x':>8}{'pays after':>12}")
    for name in models:
        plain = study_step(name)
        plain()
        plan = make_plan(record(plain).instructions)
        for ratio in STABILITY[name]:
            budget = budget_from_ratio(plan.program, ratio)
            t0 = time.perf_counter()
            try:
                staged = dtrlab.stage(study_step(name), budget_bytes=budget)
                staged()  # the first call plans without gradients, the second with them
                staged()
            except StagingOutOfMemory:
                print(f"{name:<12}{ratio:>7}{'oom':>8}", flush=True)
                continue
            staging_s = time.perf_counter() - t0  # both plans, and the two steps they ran
            plains, walls = [], []
            for _ in range(steps):  # in turns with a plain step, so a busy minute weighs on both
                t0 = time.perf_counter()
                plain()
                t1 = time.perf_counter()
                staged()
                walls.append(time.perf_counter() - t1)
                plains.append(t1 - t0)
            plain_s, staged_s = statistics.median(plains), statistics.median(walls)
            times = [w / plain_s for w in walls]
            live = live_step(study_step(name), budget, "dtr", "logical", 0, "cpu", plan, engine="c")
            pays = (f"{'-':>12}" if live.outcome != "ok" else f"{'never':>12}" if live.wall_s <= staged_s
                    else f"{staging_s / (live.wall_s - staged_s):>12.1f}")
            live_x = f"{live.wall_s / plain_s:>8.2f}" if live.outcome == "ok" else f"{live.outcome:>8}"
            med, p = statistics.median(times), staged.plan
            print(f"{name:<12}{ratio:>7}{p.replay.overhead:>8.2f}{p.replay.n_recompute:>8}{min(times):>8.2f}"
                  f"{med:>10.2f}{max(times):>8.2f}{max(times) / min(times):>9.2f}"
                  f"{sum(t > 1.5 * med for t in times):>10}{staging_s:>11.1f}{live_x}{pays}", flush=True)


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
    ap.add_argument("--backend", default="graph", choices=("graph", "inductor"),
                    help="how the staged graph runs (inductor: also its peak by the allocator and how close a "
                         "step from the plain step's state is to the plain step's)")
    ap.add_argument("--stability", action="store_true",
                    help=f"{STABILITY_STEPS} steps at each ratio of the study's windows (ResNet-32, LSTM), the shipped "
                         "sizes, the live runtime's step (no update), against one live step, instead")
    args = ap.parse_args()
    if args.stability:
        models = [m for m in args.models.split(",") if m in STABILITY]
        stability(models[:1] if args.smoke else models, 2 if args.smoke else STABILITY_STEPS)
        return 0
    ratios = tuple(float(r) for r in args.ratios.split(","))
    planners = ("dtr", "optimal") if args.planner == "both" else (args.planner,)
    if args.smoke:  # one tiny model, unbounded, one timed step
        args.models, args.repeat, ratios = next(iter(ZOO)), 1, RATIOS[:1]
    inductor = args.backend == "inductor"
    print(f"staged benchmark, DTR, eager-optimized, SGD momentum, median of {args.repeat} steps, "
          f"{torch.get_num_threads()} threads, backend {args.backend}")
    print(f"{'model':<12}{'ratio':>6}{'planner':>9}{'plain ms':>10}{'staged ms':>11}{'wall x':>8}{'plan x':>8}"
          f"{'recomp':>8}{'staging s':>11}" + (f"{'peak B':>12}{'budget B':>12}{'max rel diff':>14}" if inductor else ""))
    for name in args.models.split(","):
        sizes = {} if args.full else (ZOO[name].tiny if args.smoke else ZOO[name].small)
        plain = zoo_step(name, sizes)
        plain()  # the optimizer's state, as the staged step's second plan has it
        plain_s = median_seconds(plain, args.repeat, warm=True)  # for the rows that do not stage
        for ratio in ratios:
            for planner in planners:
                step = zoo_step(name, sizes)
                t0 = time.perf_counter()
                try:
                    staged = dtrlab.stage(step, ratio=ratio, planner=planner, time_limit_s=args.time_limit,
                                          backend=args.backend)
                    staged()  # makes the optimizer's state
                    staged()  # plans again with it
                    while inductor and not staged.compiled:
                        staged()  # and compiles, on the last plan's second run
                except StagingOutOfMemory:
                    print(f"{name:<12}{ratio:>6}{planner:>9}{plain_s * 1e3:>10.2f}{'oom':>11}")
                    continue
                staging_s = time.perf_counter() - t0
                plain_ms, staged_ms, ratio_x = interleaved(plain, staged, args.repeat)
                p = staged.plan
                extra = ""
                if inductor:
                    _, peak = staged.measured()
                    extra = f"{peak.peak_bytes:>12,}{p.budget_bytes:>12,}{closeness(plain, staged):>14.2e}"
                print(f"{name:<12}{ratio:>6}{planner:>9}{plain_ms:>10.2f}{staged_ms:>11.2f}"
                      f"{ratio_x:>8.2f}{p.replay.overhead:>8.2f}{p.replay.n_recompute:>8}"
                      f"{staging_s:>11.1f}{extra}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
