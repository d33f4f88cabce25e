"""Scale: how the compiled engine's time grows with the trace, at ratios 1.0, 0.7 and 0.5 (DTR, e*),
and what the eviction search's shortcuts (runtime options +sample, +small) buy and cost.

Traces of growing length: captured LSTMs (seq 64 up), captured transformers (layers 4 up) and
synthetic traces (trace/synth.py, constants kept as a step keeps its parameters; --big: up to
1,000,000 operators); for each run the time per schedule step and per eviction, and for each family
and ratio the fitted growth exponent k of the run's time ~ operators^k (1: linear), with the time
to read, lower and take the baseline of each trace. Runs below 1.0 stop at --overhead-limit, so a
thrash costs bounded time. Then, on the shared traces (DTRLAB_SHARED or ../shared), each shortcut
against the exact search: time, overhead, and how far its decisions move (the first policy
eviction that differs, the Jaccard index of the evicted storages). Captures are kept in --keep
(default: a temporary folder). Run: `python benchmarks/bench_scale.py [--smoke] [--big]`.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from dtrlab.sim.instruments import Instruments
from dtrlab.sim.progress import RunInterrupted
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate
from dtrlab.trace import load, load_one
from dtrlab.trace.lower import lower
from dtrlab.trace.read import TraceSource, parse_bytes
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import format_trace

RATIOS = (1.0, 0.7, 0.5)
LSTM_SEQS = (64, 128, 256, 512)
TRANSFORMER_LAYERS = (4, 16, 64)
SYNTH_OPS = (1_000, 10_000, 100_000)
BIG = dict(lstm=(64, 256, 1024, 4096), transformer=(4, 16, 64, 256),
           synthetic=(1_000, 10_000, 100_000, 1_000_000))
SYNTH_WINDOW = 32  # an operator reads the last 32 names bound (trace/synth.py)
SAMPLED = "eager-optimized+sample"
SHORTCUTS = ("eager-optimized+sample", "eager-optimized+small", "eager-optimized+sample+small")
SHORTCUT_RATIOS = (0.5, 0.3)


def _synthetic(n_ops: int) -> tuple:
    """The lowered trace and the seconds to make, read and lower it. Small tensors and calls of few
    arguments reading recent values, constants kept: a long, narrow trace whose ratio 1.0 evicts
    nothing, as a step's."""
    t0 = time.perf_counter()
    data = format_trace(synthetic_trace(n_ops, n_ops, max_args=2, max_outputs=2, size_bytes=(0, 1 << 16),
                                        keep_constants=True, window=SYNTH_WINDOW)).encode()
    t1 = time.perf_counter()
    parsed = parse_bytes(data, TraceSource(f"synth-{n_ops}", f"synth-{n_ops}", "<synthetic>", None, lambda: data))
    t2 = time.perf_counter()
    program = lower(parsed)
    return program, f"made {t1 - t0:.1f} s, read {t2 - t1:.1f} s, lowered {time.perf_counter() - t2:.1f} s"


def _captured(model: str, size: int, keep: Path):
    path = keep / f"{model}-{size}.log.gz"
    if not path.exists():
        from dtrlab.capture.recorder import record
        from dtrlab.capture.save import save
        from dtrlab.capture.zoo import lstm, transformer

        import torch

        torch.manual_seed(0)
        step = (lstm(batch=4, input_size=32, hidden=64, seq=size) if model == "lstm"
                else transformer(batch=4, seq=32, d_model=64, layers=size))
        save(record(step), path)
    t0 = time.perf_counter()
    program = load_one(str(path), None, cache=False)
    return program, f"read and lowered {time.perf_counter() - t0:.1f} s"


def _fit_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) against log(operators)."""
    if len(points) < 2:
        return math.nan
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(t, 1e-9)) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else math.nan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="the two smallest synthetic traces, no captures (CI)")
    ap.add_argument("--big", action="store_true", help="longer traces (minutes of capture and memory)")
    ap.add_argument("--overhead-limit", type=float, default=10.0)
    ap.add_argument("--max-run-s", type=float, default=60.0,
                    help="a run still going after this long is stopped and its figures so far shown")
    ap.add_argument("--keep", default=None, help="folder for the captured traces (reused when there)")
    ap.add_argument("--no-capture", action="store_true", help="synthetic traces only")
    ap.add_argument("--no-shortcuts", action="store_true", help="leave out the shortcuts' comparison")
    ap.add_argument("--shortcuts-only", action="store_true", help="the shortcuts' comparison alone")
    ap.add_argument("--only", action="append", choices=("lstm", "transformer", "synthetic"),
                    help="these families only (repeatable)")
    args = ap.parse_args()
    if args.shortcuts_only:
        _shortcuts(args.smoke)
        return 0
    families: dict[str, tuple] = {"synthetic": BIG["synthetic"] if args.big else SYNTH_OPS}
    if args.smoke:
        families = {"synthetic": (200, 400)}
    elif not args.no_capture:
        try:
            import torch  # noqa: F401
            families = {"lstm": BIG["lstm"] if args.big else LSTM_SEQS,
                        "transformer": BIG["transformer"] if args.big else TRANSFORMER_LAYERS, **families}
        except ImportError:
            print("(torch not installed: synthetic traces only)")
    if args.only:
        families = {f: sizes for f, sizes in families.items() if f in args.only}
    tmp = tempfile.TemporaryDirectory() if args.keep is None else None
    keep = Path(args.keep or tmp.name)
    keep.mkdir(parents=True, exist_ok=True)
    print(f"scale benchmark: DTR / eager-optimized, compiled engine, --overhead-limit {args.overhead_limit:g}")
    print(f"{'trace':<18}{'operators':>11}{'steps':>11}{'ratio':>6}{'search':>8}{'outcome':>12}{'evictions':>11}"
          f"{'run s':>9}{'us/step':>9}{'us/evict':>10}")
    fits: dict[tuple[str, float, str], list[tuple[int, float]]] = {}
    per_step: dict[str, list[float]] = {}
    for family, sizes in families.items():
        for size in sizes:
            program, made = _synthetic(size) if family == "synthetic" else _captured(family, size, keep)
            t0 = time.perf_counter()
            baseline(program)
            made += f", baseline {time.perf_counter() - t0:.1f} s"
            steps = len(program.step_kind)
            for ratio in RATIOS:
                budget = budget_from_ratio(program, ratio)
                limit = None if ratio == 1.0 else args.overhead_limit
                for runtime in ("eager-optimized",) if ratio == 1.0 else ("eager-optimized", SAMPLED):
                    t0 = time.perf_counter()
                    r = _capped(program, budget, runtime, limit, args.max_run_s)
                    run_s = time.perf_counter() - t0
                    per_evict = f"{run_s / r.evictions * 1e6:.1f}" if r.evictions else "-"
                    search = "sample" if runtime == SAMPLED else "exact"
                    print(f"{family + '-' + str(size):<18}{program.n_ops:>11,}{steps:>11,}{ratio:>6}{search:>8}"
                          f"{r.outcome:>12}{r.evictions:>11,}{run_s:>9.3f}{run_s / steps * 1e6:>9.2f}{per_evict:>10}",
                          flush=True)
                    if r.outcome != "stopped":
                        fits.setdefault((family, ratio, search), []).append((program.n_ops, run_s))
                    if ratio == 1.0:
                        per_step.setdefault(family, []).append(run_s / steps)
            print(f"{'':<18}({made})", flush=True)
    print("growth exponent k of run time ~ operators^k (1.0: linear; time per step grows as k - 1; "
          "runs stopped by --max-run-s left out):")
    for family in families:
        print(f"  {family:<12}" + "   ".join(
            f"{ratio} {search}: k = {_fit_exponent(fits.get((family, ratio, search), [])):.2f}"
            for ratio in RATIOS for search in (("exact",) if ratio == 1.0 else ("exact", "sample"))))
    print("time per step at ratio 1.0, largest trace over smallest:")
    for family in families:
        steps_s = per_step[family]
        print(f"  {family:<12}{steps_s[-1] / steps_s[0]:.2f}x  (slowest over fastest {max(steps_s) / min(steps_s):.2f}x)")
    if tmp is not None:
        tmp.cleanup()
    if not args.no_shortcuts:
        _shortcuts(args.smoke)
    return 0


def _capped(program, budget: int, runtime: str, overhead_limit: float | None, max_run_s: float):
    """The run, or what it reached by max_run_s (outcome "stopped")."""
    deadline = time.perf_counter() + max_run_s

    def stop_late(*_figures) -> None:
        if time.perf_counter() > deadline:
            raise TimeoutError

    try:
        return simulate(program, budget, "dtr", runtime, overhead_limit=overhead_limit, engine="c",
                        progress=stop_late)
    except RunInterrupted as stopped:
        return replace(stopped.partial, outcome="stopped")


def _evicted(program, budget: int, runtime: str) -> tuple:
    t0 = time.perf_counter()
    r = simulate(program, budget, "dtr", runtime, engine="c", seed=0, instruments=Instruments(events=True))
    seconds = time.perf_counter() - t0
    return r, seconds, r.observations.events.rows("evict").columns()["storage"].tolist()


def _shortcuts(smoke: bool) -> None:
    """Each shortcut against the exact search on the shared traces (timed with the event log on)."""
    shared = Path(os.environ.get("DTRLAB_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    source = shared / "traces" / "dtr-iclr21"
    if not source.is_dir():
        print(f"(no shared traces at {source}: the shortcuts' comparison is left out)")
        return
    programs = load(source, ["resnet32"] if smoke else None, cache=False)
    print("\nthe eviction search's shortcuts against the exact search (DTR; timed with the event log on):")
    print(f"{'trace':<14}{'ratio':>6}{'runtime':>30}{'run s':>9}{'speed-up':>9}{'overhead':>10}"
          f"{'evictions':>11}{'first differs':>14}{'Jaccard':>9}")
    for program in programs:
        for ratio in SHORTCUT_RATIOS[:1] if smoke else SHORTCUT_RATIOS:
            budget = budget_from_ratio(program, ratio)
            exact, exact_s, exact_ev = _evicted(program, budget, "eager-optimized")
            print(f"{program.name:<14}{ratio:>6}{'eager-optimized (exact)':>30}{exact_s:>9.3f}{'':>9}"
                  f"{_overhead(exact):>10}{exact.evictions:>11,}{'':>14}{'':>9}")
            for runtime in SHORTCUTS:
                r, seconds, ev = _evicted(program, budget, runtime)
                first = next((k for k, (a, b) in enumerate(zip(exact_ev, ev)) if a != b),
                             None if len(ev) == len(exact_ev) else min(len(ev), len(exact_ev)))
                union = set(ev) | set(exact_ev)
                jaccard = len(set(ev) & set(exact_ev)) / len(union) if union else 1.0
                print(f"{'':<14}{'':>6}{runtime:>30}{seconds:>9.3f}{exact_s / seconds:>8.2f}x{_overhead(r):>10}"
                      f"{r.evictions:>11,}{'never' if first is None else f'#{first + 1:,}':>14}{jaccard:>9.3f}",
                      flush=True)


def _overhead(r) -> str:
    return f"{r.overhead:.3f}" if r.outcome == "ok" else r.outcome


if __name__ == "__main__":
    sys.exit(main())
