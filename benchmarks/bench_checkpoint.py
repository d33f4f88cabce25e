"""The staged DTR step against PyTorch's checkpointing, at matched measured peak memory: each zoo
model's step (SGD, momentum 0.9; one thread, CPU) plain, checkpointed per block, with selective
checkpointing (matmuls and convolutions saved), staged at --ratios, compiled by inductor under
torch._functorch.config.activation_memory_budget at --budgets, and compiled with DTR's choice as the
partitioner's knapsack at --dtr-ratios (compile-dtr); every mode's steps timed in turns
(the medians of --repeat rounds), every peak measured on one step (dtrlab.compare, docs/checkpointing.md).

Prints a table per model and, per mode, the fastest staged step whose peak is no higher (the
comparison at matched memory); writes a figure of peak memory (x) against step time (y), one curve
per mode, to --figure, and the points as JSON beside it.

Run: `python benchmarks/bench_checkpoint.py [--full] [--smoke] [--models unet,densenet] [--repeat N]
[--ratios 1.0,0.5] [--compile-models transformer] [--budgets 0.1,0.5,0.9] [--dtr-ratios 1.0,0.9]
[--figure PATH] [--replot JSON]`; the default
is the zoo's `small` sizes (a minute a model without compiling), --full the zoo's defaults.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from dtrlab.capture.zoo import ZOO
from dtrlab.compare import Mode, Point, compare
from dtrlab.compare.compiled import plain_allocator_peak_bytes
from dtrlab.compare.matched import at_matched_memory

from _timing import SMOKE_HELP  # noqa: E402  (benchmarks/ is on sys.path)

RATIOS = (1.0, 0.8, 0.7, 0.6, 0.5, 0.4)
BUDGETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DTR_RATIOS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)  # compile-dtr's, of the partitioner's joint graph's peak
# Compiled by default: the Transformer only. Inductor takes 30 s to 2 min a budget here, and at the
# zoo's small sizes ResNet-32 (width 4) corrupts the heap in inductor's compiled backward.
COMPILE_MODELS = ("transformer",)
# At the zoo's default sizes the LSTM takes about 15 s a step and 90 s to stage, and has no blocks.
FULL_MODELS = ("resnet32", "transformer", "unet", "densenet")
KIB = 1024


def modes(ratios, budgets, dtr_ratios, compiled: bool) -> list[Mode]:
    out = [Mode("plain"), Mode("checkpoint"), Mode("sac")] + [Mode("staged", r) for r in ratios]
    if compiled:
        out += [Mode("compile", b) for b in budgets] + [Mode("compile-dtr", r) for r in dtr_ratios]
    return out


def table(points, plain_alloc: int | None) -> None:
    plain = next(p for p in points if p.mode == "plain")
    print(f"{'mode':<16}{'peak KiB':>10}{'x plain':>9}{'step ms':>10}{'x plain':>9}{'counter':>11}{'ready s':>9}")
    for p in points:
        if p.peak_bytes is None:
            print(f"{p.label:<16}  {p.skipped}")
            continue
        base = plain_alloc if p.peak_kind == "allocator" else plain.peak_bytes
        print(f"{p.label:<16}{p.peak_bytes / KIB:>10.1f}{p.peak_bytes / base:>9.2f}{p.step_s * 1e3:>10.2f}"
              f"{p.step_s / plain.step_s:>9.2f}{p.peak_kind:>11}{p.prepare_s:>9.1f}  {p.detail}")
    if plain_alloc is not None:
        print(f"{'plain':<16}{plain_alloc / KIB:>10.1f}{1:>9.2f}{'':>10}{'':>9}{'allocator':>11}")


def matched(points) -> None:
    """For each other mode, the fastest staged step whose measured peak is at most the mode's
    (dtrlab.compare.matched)."""
    for m in at_matched_memory(points):
        if m.staged is None:
            print(f"  at {m.label}'s peak ({m.peak_bytes / KIB:.1f} KiB): {m.verdict}")
            continue
        print(f"  at {m.label}'s peak ({m.peak_bytes / KIB:.1f} KiB, {m.step_s * 1e3:.2f} ms): {m.staged} "
              f"({m.staged_peak_bytes / KIB:.1f} KiB) {m.staged_step_s * 1e3:.2f} ms, {m.step_ratio:.2f}x: {m.verdict}")


def figure(results: dict, path: Path) -> None:
    """dtrlab.report.plots.checkpointing_curves of `results` (model -> (points, plain's allocator peak)), saved."""
    from dtrlab.report.plots import checkpointing_curves, plt  # plots sets matplotlib's Agg backend first

    fig = checkpointing_curves(results)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", default=None, help=f"default: all; with --full {','.join(FULL_MODELS)}")
    ap.add_argument("--full", action="store_true", help="the zoo's default sizes, not its small ones")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    ap.add_argument("--ratios", default=",".join(map(str, RATIOS)), help="staged DTR's budget ratios")
    ap.add_argument("--compile-models", default=",".join(COMPILE_MODELS),
                    help="models also run compiled at --budgets ('' for none)")
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="activation_memory_budget values")
    ap.add_argument("--dtr-ratios", default=",".join(map(str, DTR_RATIOS)),
                    help="compile-dtr's ratios of the joint graph's peak ('' for none)")
    ap.add_argument("--figure", default="checkpointing.png", help="where the figure goes (and its .json)")
    ap.add_argument("--replot", metavar="JSON", help="draw the figure again from a run's JSON; run nothing")
    args = ap.parse_args()
    if args.replot:
        runs = json.loads(Path(args.replot).read_text())
        figure({name: ([Point(**p) for p in r["points"]], r["plain_allocator_peak_bytes"])
                for name, r in runs.items()}, Path(args.figure))
        return 0
    torch.set_num_threads(1)
    ratios = tuple(float(r) for r in args.ratios.split(",") if r)
    budgets = tuple(float(b) for b in args.budgets.split(",") if b)
    dtr_ratios = tuple(float(r) for r in args.dtr_ratios.split(",") if r)
    compiled = set(filter(None, args.compile_models.split(",")))
    models = args.models.split(",") if args.models else list(FULL_MODELS if args.full else ZOO)
    if args.smoke:  # one tiny model, plain, checkpointed, unbounded staged; nothing compiled
        models, args.repeat, ratios, compiled = [next(iter(ZOO))], 1, RATIOS[:1], set()
    print(f"checkpointing benchmark: SGD momentum, {torch.get_num_threads()} thread, median of {args.repeat} "
          f"rounds (modes in turns), {'default' if args.full else 'tiny' if args.smoke else 'small'} sizes")
    results = {}
    t0 = time.perf_counter()
    for name in models:
        sizes = {} if args.full else (ZOO[name].tiny if args.smoke else ZOO[name].small)
        print(f"\n{name}: {ZOO[name].description(**sizes)}", flush=True)
        points = compare(name, sizes, modes(ratios, budgets, dtr_ratios, name in compiled), repeat=args.repeat)
        plain_alloc = plain_allocator_peak_bytes(name, sizes) if name in compiled else None
        results[name] = (points, plain_alloc)
        table(points, plain_alloc)
        matched(points)
        # written after each model: a run stopped part way keeps what it measured
        figure(results, Path(args.figure))
        Path(args.figure).with_suffix(".json").write_text(json.dumps(
            {name: {"points": [p.as_dict() for p in ps], "plain_allocator_peak_bytes": a}
             for name, (ps, a) in results.items()}, indent=1))
    print(f"\nfigure: {args.figure}; {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
