"""`dtrlab optimal`: the best schedule a solver finds for one trace and budget, and a bound no schedule beats.

A thin typer layer over optimal.solve; progress lines go to stderr, the result to stdout. Also the solve's
options (--time-limit, --solver, --gap, --bound-only), declared once here for `dtrlab sweep` and
`dtrlab reproduce` too, and settings_given, which turns them into SolveSettings.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from .options import BYTES_OPT, JSON_OPT, RATIO_OPT, SOURCE_ARG, TRACE_OPT, TRACES_OPT
from ..output import clean, console, print_json
from ..trace import resolve_source
from ..optimal.defaults import DEFAULT_GAP, DEFAULT_SOLVER, DEFAULT_THREADS, DEFAULT_TIME_LIMIT_S, SOLVERS, SolveSettings

SolverName = Enum("SolverName", {name: name for name in SOLVERS}, type=str)

TIME_LIMIT_OPT = typer.Option(DEFAULT_TIME_LIMIT_S, "--time-limit", metavar="S",
                              help="Seconds for the whole solve of a budget; the best found by then is reported.")
SOLVER_OPT = typer.Option(DEFAULT_SOLVER, "--solver", help="highs (the default) or cpsat.")
GAP_OPT = typer.Option(DEFAULT_GAP, "--gap", metavar="G",
                       help="Stop once the best is within G of the bound, in overhead (0.0001: 0.01%).")
BOUND_ONLY_OPT = typer.Option(False, "--bound-only",
                              help="No model (any size of trace, seconds): the crossing bound, and the best "
                                   "schedule of a portfolio of the built-in policies' runs.")


def settings_given(time_limit: float, solver, gap: float, bound_only: bool) -> SolveSettings:
    """The options above as SolveSettings (a bad value is one line)."""
    return SolveSettings(getattr(solver, "value", solver), time_limit, gap, bound_only)


def optimal_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    time_limit: float = TIME_LIMIT_OPT,
    solver: SolverName = SOLVER_OPT,
    threads: int = typer.Option(DEFAULT_THREADS, "--threads", metavar="N", help="The solver's threads."),
    gap: float = GAP_OPT,
    schedule_out: Optional[str] = typer.Option(None, "--schedule-out", metavar="FILE",
                                               help="Write the best schedule (docs/schedules.md) to FILE."),
    bound_only: bool = BOUND_ONLY_OPT,
    least: bool = typer.Option(False, "--least-budget",
                               help="No budget: the least budget of any schedule (a proven floor, and the "
                                    "least at which one was found, by bisection) beside DTR's own."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
    as_json: bool = JSON_OPT,
) -> None:
    """The best schedule found for one trace under one budget, replayed by the schedule checker, and a
    lower bound on the overhead of any schedule (docs/optimal.md)."""
    source = resolve_source(source, traces)
    from ..sim.simulate import budget_of, check_budget_args
    from ..trace import load_one
    from ..optimal.solve import solve

    if least:
        if ratio is not None or budget_bytes is not None:
            raise UsageError("--least-budget searches the budget itself: give no --ratio or --budget-bytes")
        _least_budget(load_one(source, trace), quiet, as_json)
        return
    check_budget_args(ratio, budget_bytes)
    settings = settings_given(time_limit, solver, gap, bound_only)
    if threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    if schedule_out is not None:
        target = Path(schedule_out)
        if target.is_dir():
            raise UsageError(f"{schedule_out}: is a folder; --schedule-out names the file to write")
        if not target.parent.is_dir():
            raise UsageError(f"{target.parent}: no such folder")
    program = load_one(source, trace)
    budget = budget_of(program, ratio, budget_bytes)
    say = None if quiet else (lambda msg: typer.echo(f"optimal: {msg}", err=True))
    result = solve(program, budget, settings, threads=threads, progress=say)
    if schedule_out is not None and result.schedule is not None:
        from ..schedule.format import write_schedule

        write_schedule(result.schedule, schedule_out, {"trace": program.name, "overhead": result.overhead,
                                                       "bound_overhead": result.bound_overhead})
    out = {k: clean(v) if isinstance(v, float) else v for k, v in result.to_dict().items()}
    out["ratio"] = ratio
    out["schedule_out"] = schedule_out if result.schedule is not None else None
    if as_json:
        print_json(out)
        return
    from rich.table import Table

    table = Table(title=f"{program.name}: optimal ({result.kind}, {result.solver}), budget {budget:,} bytes"
                        + (f", ratio {ratio:g}" if ratio is not None else ""), title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")

    def x(v):
        return "n/a" if v is None else "inf" if v == math.inf else f"{v:.6f}"

    rows = [("status", result.status), ("best found (replayed)", x(result.overhead)),
            ("lower bound", x(result.bound_overhead)), ("gap", "n/a" if result.gap is None else f"{result.gap:.2%}"),
            ("DTR at this budget", x(result.dtr_overhead)), ("LP bound", x(result.lp_bound_overhead)),
            ("crossing bound", x(result.crossing_bound_overhead)),
            ("solve time", f"{result.solve_s:.1f} s ({result.rounds} solve(s), {result.exact_stages} exact stage(s), "
                           f"{result.polished_windows} window(s) polished cheaper)"),
            ("model", f"{result.n_binaries:,} binaries, {result.n_rows:,} rows")]
    if result.replay is not None:
        rows += [("peak memory", f"{result.replay.peak_bytes:,}"), ("recomputations", f"{result.replay.n_recompute:,}")]
    if out["schedule_out"]:
        rows.append(("schedule", schedule_out))
    for label, value in rows:
        table.add_row(label, value)
    console().print(table)


def _least_budget(program, quiet: bool, as_json: bool) -> None:
    from ..optimal.least import least_budget

    say = None if quiet else (lambda msg: typer.echo(f"optimal: {msg}", err=True))
    result = least_budget(program, say or (lambda _msg: None))
    out = result.to_dict()
    if as_json:
        print_json({k: clean(v) if isinstance(v, float) else v for k, v in out.items()})
        return
    from rich.table import Table

    table = Table(title=f"{program.name}: the least budget (peak {result.peak_bytes:,} bytes)", title_justify="left")
    for column in ("", "bytes", "of the peak"):
        table.add_column(column, justify="left" if not column else "right")

    def row(label: str, name: str) -> None:
        v = out[f"{name}_bytes"]
        table.add_row(label, "n/a" if v is None else f"{v:,}", "n/a" if v is None else f"{out[name + '_ratio']:.4f}")

    row("no schedule fits below (proven)", "no_schedule_below")
    found = (f" ({result.found_maker}, {result.found_overhead:.4f}x)" if result.found_maker is not None else "")
    row("a schedule found at" + found, "schedule_found")
    row("DTR ends ok down to", "dtr")
    console().print(table)
    console().print(f"found by bisection in {result.time_s:.1f} s; feasibility is not monotone, so each is one "
                    f"boundary (docs/optimal.md, the least budget)")


def register(app: typer.Typer) -> None:
    app.command("optimal")(optimal_cmd)
