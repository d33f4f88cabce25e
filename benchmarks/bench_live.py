"""The live runtime's machinery: a zoo model's training step under a LiveSession against the plain step.

At an unbounded budget (nothing evicted: the machinery only), as ratios to the plain step's wall
time: two floors, a dispatch mode that does nothing but call each operator (the floor of any
runtime that sees every aten operator from Python) and one that also unwraps its arguments and
wraps its results in a wrapper subclass below autograd (the floor of the live runtime's design);
then the live runtime unplanned (named and lowered as it runs, on the Python engine), and
following the step's capture (planned) on the compiled engine and on the Python one. "op runs" is
what the operators themselves took in the planned run (the measured clock's sum of their first
runs, each timed around its aten call, nothing evicted), against the plain step's wall time:
the rest of a live step's time is dispatch, wrapping and the runtime's bookkeeping.
Then at ratio 0.5 of the plan's peak on the logical clock, planned on the compiled engine: the
outcome and the wall time's ratio to a plain step, beside the overhead the simulation of the plan
predicts (clock / compute) for the same decisions.

Each round times every variant once, in turn, so that a busy machine slows them alike, each after
a full collection (another variant's garbage is not its cost); the figures are medians over
rounds, in one process, one thread. Run: `make bench` or
`python benchmarks/bench_live.py [--repeat N] [--models resnet32,lstm] [--tiny]` (--tiny: the test
sizes; default: the sizes the zoo's traces ship at, capture/ship.py). Needs torch (the capture extra).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time

RATIO = 0.5


def _rounds(variants: dict, repeat: int) -> dict[str, float]:
    """Median seconds of each variant over `repeat` rounds, each round timing every variant once
    (after one warm-up round)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for k in range(repeat + 1):
        for name, fn in variants.items():
            gc.collect()  # the last variant's garbage is not this one's to collect
            t0 = time.perf_counter()
            fn()
            if k:
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _ops_seconds(step, plan) -> float:
    """Seconds the step's operators took in a planned run on the measured clock (at an unbounded
    budget the clock is the sum of their first runs, each timed around its aten call)."""
    from dtrlab.live.session import LiveSession

    gc.collect()
    with LiveSession(plan=plan, engine="c", clock="measured") as session:
        step()
    return session.clock_ns / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default="", help="comma-separated zoo models (default: all)")
    ap.add_argument("--tiny", action="store_true", help="the tests' sizes instead of the shipped ones")
    ap.add_argument("--smoke", action="store_true", help="one round of the LSTM at the tests' size (CI: it must run)")
    args = ap.parse_args()
    if args.smoke:
        args.repeat, args.models, args.tiny = 1, "lstm", True
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
    except ModuleNotFoundError:
        print("skipped: torch is not installed (pip install -e '.[capture]')")
        return 0
    from dtrlab.capture.recorder import record
    from dtrlab.capture.ship import SHIPPED_SIZES
    from dtrlab.capture.zoo import ZOO
    from dtrlab.live.recipes import flatten_call, flatten_out, unflatten_call, unflatten_out
    from dtrlab.live.runs import live_step, simulate_plan
    from dtrlab.live.session import LiveSession, make_plan, make_wrapper
    from dtrlab.sim.simulate import budget_from_ratio

    class CallOnly(TorchDispatchMode):
        pass

    def call_only(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

    class Wrapper(torch.Tensor):
        """Metadata and the value it wraps, nothing else."""

        @staticmethod
        def __new__(cls, value):
            t = make_wrapper(cls, value)  # as the live runtime's LiveTensor is made
            t.value = value
            return t

        __torch_function__ = torch._C._disabled_torch_function_impl

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise AssertionError("only under WrapOnly")

    class WrapOnly(TorchDispatchMode):
        pass

    def wrap_only(self, func, types, args=(), kwargs=None):
        flat, spec = flatten_call(args, kwargs or {})
        a, k = unflatten_call([x.value if type(x) is Wrapper else x for x in flat], spec)
        out, out_spec = flatten_out(func(*a, **k))
        return unflatten_out([Wrapper(x) if isinstance(x, torch.Tensor) else x for x in out], out_spec)

    # as LiveSession's handler, set after the class: no dynamo guard around it
    CallOnly.__torch_dispatch__ = call_only
    WrapOnly.__torch_dispatch__ = wrap_only

    torch.set_num_threads(1)
    names = [n for n in args.models.split(",") if n] or list(ZOO)
    print(f"{'model':12} {'ops':>6} {'plain s':>8} {'call only':>10} {'wrap only':>10} {'unplanned':>10} {'planned c':>10} "
          f"{'planned py':>11} {'op runs':>8}   at {RATIO}: {'outcome':>7} {'wall ratio':>10} {'predicted':>9}  "
          f"(medians of {args.repeat} rounds, {'tiny' if args.tiny else 'shipped'} sizes)")
    for name in names:
        torch.manual_seed(0)
        step = ZOO[name].make(**(ZOO[name].tiny if args.tiny else SHIPPED_SIZES[name]))
        step()
        capture = record(step)
        plan = make_plan(capture.instructions)

        def under(mode_of):
            def run() -> None:
                with mode_of():
                    step()
            return run

        t = _rounds({"plain": step, "call": under(CallOnly), "wrap": under(WrapOnly), "unplanned": under(LiveSession),
                     "c": under(lambda: LiveSession(plan=plan, engine="c")),
                     "python": under(lambda: LiveSession(plan=plan, engine="python"))}, args.repeat)
        plain = t["plain"]
        ops_s = statistics.median(_ops_seconds(step, plan) for _ in range(3))
        budget = budget_from_ratio(plan.program, RATIO)
        run = live_step(step, budget, "dtr", "logical", 0, "cpu", plan, engine="c")
        sim = simulate_plan(plan.program, budget, "dtr", 0)
        predicted = f"{sim.overhead:9.3f}" if sim.overhead else f"{'oom':>9}"
        print(f"{name:12} {capture.operators:6d} {plain:8.4f} {t['call'] / plain:9.2f}x {t['wrap'] / plain:9.2f}x "
              f"{t['unplanned'] / plain:9.2f}x {t['c'] / plain:9.2f}x {t['python'] / plain:10.2f}x {ops_s / plain:7.2f}x   "
              f"at {RATIO}: {run.outcome:>7} {run.wall_s / plain:9.2f}x {predicted}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
