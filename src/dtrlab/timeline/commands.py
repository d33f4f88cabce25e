"""`dtrlab timeline`: one run's events written for Perfetto, PyTorch's memory viewer, or pandas.

A thin typer layer: check the arguments, record the run (timeline.source), call one format's writer.
"""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME
from ..errors import UsageError
from ..options import POLICIES_FILE_OPT, POLICY_HELP, SOURCE_ARG, TRACES_OPT
from ..output import print_json
from ..trace import resolve_source


class Format(str, Enum):
    perfetto = "perfetto"
    memviz = "memviz"
    csv = "csv"


# Each format's writer: (module, function); imported only when asked for (perfetto's protos are big).
WRITERS = {Format.perfetto: ("perfetto", "write_perfetto"), Format.memviz: ("memviz", "write_memviz"),
           Format.csv: ("table", "write_csv")}
# The file name ending each format conventionally has (docs/timelines.md says how to open each).
SUFFIXES = {Format.perfetto: ".pftrace", Format.memviz: ".pickle", Format.csv: ".csv"}


def write(tl, fmt: Format | str, path: str | Path):
    """Write the timeline `tl` in format `fmt` to `path`; the writer's counts."""
    import importlib

    module, name = WRITERS[Format(fmt)]
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)(tl, path)


def timeline_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = typer.Option(None, "--trace", "-t", metavar="NAME",
                                        help="The trace whose name starts with NAME (needed when SOURCE holds several)."),
    ratio: Optional[float] = typer.Option(None, "--ratio", "-r", metavar="R",
                                          help="Budget as a fraction of the unconstrained peak memory."),
    budget_bytes: Optional[int] = typer.Option(None, "--budget-bytes", "-b", metavar="B", help="Budget in bytes."),
    policy: Optional[str] = typer.Option(None, "--policy", "-p", help=POLICY_HELP + " Default: " + DEFAULT_POLICY + "."),
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = typer.Option(DEFAULT_RUNTIME, "--runtime", help="Runtime."),
    fmt: Format = typer.Option(..., "--format", "-f", help="perfetto (ui.perfetto.dev), memviz "
                                                           "(pytorch.org/memory_viz) or csv."),
    out: str = typer.Option(..., "--out", "-o", metavar="FILE", help="Where to write the timeline."),
    window: Optional[str] = typer.Option(None, "--window", metavar="START:END",
                                         help="Keep only this stretch of the simulated clock (ns, both included)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random policies."),
    as_json: bool = typer.Option(False, "--json", help="Print what was written as one JSON object."),
) -> None:
    """Write one run's timeline: operators, rematerializations, evictions and memory over the clock."""
    source = resolve_source(source, traces)
    from ..sim.policies import get_policy
    from ..sim.policyfile import policy_given
    from ..sim.runtimes import get_runtime
    from ..sim.simulate import budget_of, check_budget_args, check_compatible
    from ..trace import load_one
    from .source import parse_window, record

    check_budget_args(ratio, budget_bytes)
    cut = parse_window(window)
    policy = policy_given(policy, policies_file)
    check_compatible(get_policy(policy), get_runtime(runtime))
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"{out}: is a folder; --out names the file to write")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such folder")
    program = load_one(source, trace)
    budget = budget_of(program, ratio, budget_bytes)
    t0 = time.perf_counter()
    tl = record(program, budget, policy, runtime, ratio=ratio, seed=seed).cut(cut)
    t1 = time.perf_counter()
    counts = write(tl, fmt, target)
    t2 = time.perf_counter()
    r = tl.result
    info = {"trace": program.name, "policy": r.policy, "runtime": r.runtime, "ratio": ratio, "budget_bytes": budget,
            "outcome": r.outcome, "engine": r.engine, "events": len(tl.log), "format": fmt.value,
            "window": cut.label if cut else None, "out": str(target), "file_bytes": target.stat().st_size,
            "simulate_s": round(t1 - t0, 3), "write_s": round(t2 - t1, 3),
            "written": counts if isinstance(counts, int) else counts.__dict__}
    if as_json:
        print_json(info)
        return
    typer.echo(f"{target}: {fmt.value}, {info['file_bytes']:,} bytes, {tl.title} ({len(tl.log):,} events, "
               f"{r.engine} engine; simulated in {info['simulate_s']:.2f} s, written in {info['write_s']:.2f} s)")


def register(app: typer.Typer) -> None:
    app.command("timeline")(timeline_cmd)
