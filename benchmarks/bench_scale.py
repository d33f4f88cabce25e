"""Scale: how the compiled engine's time grows with the trace, at ratios 1.0, 0.7 and 0.5 (DTR, e*).

Traces of growing length: captured LSTMs (seq 64 up), captured transformers (layers 4 up) and
synthetic traces (trace/synth.py); for each run the time per schedule step and per eviction, and
for each family and ratio the fitted growth exponent k of the run's time ~ operators^k (1: linear).
Runs below 1.0 stop at --overhead-limit, so a thrash costs bounded time. Captures are kept in
--keep (default: a temporary folder). Run: `python benchmarks/bench_scale.py [--smoke] [--big]`.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate
from dtrlab.trace import load_one
from dtrlab.trace.lower import lower
from dtrlab.trace.read import TraceSource, parse_bytes
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import format_trace

RATIOS = (1.0, 0.7, 0.5)
LSTM_SEQS = (64, 128, 256, 512)
TRANSFORMER_LAYERS = (4, 16, 64)
SYNTH_OPS = (1_000, 4_000, 16_000)
BIG = dict(lstm=(64, 128, 256, 512, 1024), transformer=(4, 16, 64, 128), synthetic=(1_000, 4_000, 16_000, 32_000))


def _synthetic(n_ops: int):
    # small tensors and calls of few arguments: a long, narrow trace like a real step's
    data = format_trace(synthetic_trace(n_ops, n_ops, max_args=2, max_outputs=2, size_bytes=(0, 1 << 16))).encode()
    return lower(parse_bytes(data, TraceSource(f"synth-{n_ops}", f"synth-{n_ops}", "<synthetic>", None,
                                               lambda: data)))


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
    return load_one(str(path), None, cache=False)


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
    ap.add_argument("--keep", default=None, help="folder for the captured traces (reused when there)")
    ap.add_argument("--no-capture", action="store_true", help="synthetic traces only")
    args = ap.parse_args()
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
    tmp = tempfile.TemporaryDirectory() if args.keep is None else None
    keep = Path(args.keep or tmp.name)
    keep.mkdir(parents=True, exist_ok=True)
    print(f"scale benchmark: DTR / eager-optimized, compiled engine, --overhead-limit {args.overhead_limit:g}")
    print(f"{'trace':<18}{'operators':>10}{'steps':>9}{'ratio':>6}{'outcome':>12}{'evictions':>11}"
          f"{'run s':>9}{'us/step':>9}{'us/evict':>10}")
    fits: dict[tuple[str, float], list[tuple[int, float]]] = {}
    for family, sizes in families.items():
        for size in sizes:
            t0 = time.perf_counter()
            program = _synthetic(size) if family == "synthetic" else _captured(family, size, keep)
            baseline(program)
            made_s = time.perf_counter() - t0
            steps = len(program.step_kind)
            for ratio in RATIOS:
                budget = budget_from_ratio(program, ratio)
                limit = None if ratio == 1.0 else args.overhead_limit
                t0 = time.perf_counter()
                r = simulate(program, budget, "dtr", overhead_limit=limit, engine="c")
                run_s = time.perf_counter() - t0
                per_evict = f"{run_s / r.evictions * 1e6:.1f}" if r.evictions else "-"
                print(f"{family + '-' + str(size):<18}{program.n_ops:>10,}{steps:>9,}{ratio:>6}{r.outcome:>12}"
                      f"{r.evictions:>11,}{run_s:>9.3f}{run_s / steps * 1e6:>9.2f}{per_evict:>10}", flush=True)
                fits.setdefault((family, ratio), []).append((program.n_ops, run_s))
            print(f"{'':<18}(made, lowered and its baseline taken in {made_s:.1f} s)", flush=True)
    print("growth exponent k of run time ~ operators^k (1.0: linear; time per step grows as k - 1):")
    for family in families:
        print(f"  {family:<12}" + "".join(f"ratio {ratio}: k = {_fit_exponent(fits[family, ratio]):.2f}   "
                                          for ratio in RATIOS))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
