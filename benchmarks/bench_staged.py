"""Staged steps' speed: each zoo model's step with SGD (momentum 0.9) plain and staged at ratios 1.0 and
0.5 (median step wall time, after the staged step's second plan), the staging time (trace, lower,
simulate, check, rewrite) and the simulator's predicted overhead beside the measured one.

Run: `python benchmarks/bench_staged.py [--repeat N] [--models resnet32,lstm] [--full] [--smoke]`; the default is
the zoo's `small` sizes (a smoke size: under a minute a model on a 2-core machine), --full the zoo's defaults.
"""

from __future__ import annotations

import argparse

import torch

import dtrlab
from dtrlab.capture.zoo import ZOO
from dtrlab.staged import StagingOutOfMemory

from _timing import SMOKE_HELP, median_seconds  # noqa: E402  (benchmarks/ is on sys.path)

RATIOS = (1.0, 0.5)


def world(name: str, sizes: dict):
    torch.manual_seed(0)
    step = ZOO[name].make(**sizes)
    opt = torch.optim.SGD(step.model.parameters(), lr=0.01, momentum=0.9)

    def full():
        step()
        opt.step()
    full.model, full.optimizer = step.model, opt
    return full


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--full", action="store_true", help="the zoo's default sizes, not its small ones")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    ratios = RATIOS
    if args.smoke:  # one tiny model, unbounded, one timed step
        args.models, args.repeat, ratios = next(iter(ZOO)), 1, RATIOS[:1]
    print(f"staged benchmark, DTR, eager-optimized, SGD momentum, median of {args.repeat} steps, "
          f"{torch.get_num_threads()} threads")
    print(f"{'model':<12}{'ratio':>6}{'plain ms':>10}{'staged ms':>11}{'wall x':>8}{'sim x':>8}"
          f"{'recomp':>8}{'staging s':>11}")
    for name in args.models.split(","):
        sizes = {} if args.full else (ZOO[name].tiny if args.smoke else ZOO[name].small)
        plain = world(name, sizes)
        plain()  # the optimizer's state, as the staged step's second plan has it
        plain_s = median_seconds(plain, args.repeat, warm=True)
        for ratio in ratios:
            step = world(name, sizes)
            try:
                staged = dtrlab.stage(step, ratio=ratio)
                staged()  # makes the optimizer's state
                staged()  # plans again with it
            except StagingOutOfMemory:
                print(f"{name:<12}{ratio:>6}{plain_s * 1e3:>10.2f}{'oom':>11}")
                continue
            staged_s = median_seconds(staged, args.repeat, warm=True)
            p = staged.plan
            print(f"{name:<12}{ratio:>6}{plain_s * 1e3:>10.2f}{staged_s * 1e3:>11.2f}{staged_s / plain_s:>8.2f}"
                  f"{p.replay.overhead:>8.2f}{p.replay.n_recompute:>8}{p.times_ns['total_ns'] / 1e9:>11.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
