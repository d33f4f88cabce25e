"""`dtrlab timeline`: one run's events written for Perfetto, PyTorch's memory viewer, or pandas.

A thin typer layer: check the arguments, record the run (timeline.source), call one format's writer.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from .options import (BYTES_OPT, ENGINE_OPT, JSON_OPT, POLICIES_FILE_OPT, POLICY_OPT, RATIO_OPT, RUNTIME_OPT,
                       SEED_OPT, SOURCE_ARG, TRACE_OPT, TRACES_OPT, EngineName)
from ..timeline.write import Format, write
from ..output import print_json
from ..trace import resolve_source


def timeline_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = RUNTIME_OPT,
    fmt: Format = typer.Option(..., "--format", "-f", help="perfetto (ui.perfetto.dev), memviz "
                                                           "(pytorch.org/memory_viz) or csv."),
    out: str = typer.Option(..., "--out", "-o", metavar="FILE", help="Where to write the timeline."),
    window: Optional[str] = typer.Option(None, "--window", metavar="START:END",
                                         help="Keep only this stretch of the simulated clock (ns, both included)."),
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Write one run's timeline: operators, rematerializations, evictions and memory over the clock."""
    source = resolve_source(source, traces)
    from ..sim.policyfile import policy_given
    from ..sim.simulate import load_for
    from ..sim.simulate import budget_of, check_budget_args
    from ..timeline.source import parse_window, record

    check_budget_args(ratio, budget_bytes)
    cut = parse_window(window)
    policy = policy_given(policy, policies_file)
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"{out}: is a folder; --out names the file to write")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such folder")
    program = load_for(source, trace, policy, runtime)  # checks the names before reading the trace
    budget = budget_of(program, ratio, budget_bytes)
    t0 = time.perf_counter()
    tl = record(program, budget, policy, runtime, ratio=ratio, seed=seed, engine=engine.value).cut(cut)
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
