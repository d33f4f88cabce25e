"""`dtrlab schedule check`: replay a schedule file against its trace under a budget and say what it costs.

A thin typer layer over schedule.format and schedule.check; a rejected schedule is `FILE:LINE: reason`, exit 2.
"""

from __future__ import annotations

from typing import Optional

import typer
from typer.core import TyperGroup

from ..formats import overhead_text
from ..errors import UsageError
from .options import BYTES_OPT, JSON_OPT, RATIO_OPT, TRACE_OPT
from ..output import console, print_json


def check_cmd(
    source: str = typer.Argument(..., metavar="TRACE",
                                 help="The trace the schedule is for: a file, or a folder or zip of traces (the one "
                                      "with the schedule's sha256, or --trace NAME)."),
    path: str = typer.Argument(..., metavar="FILE", help="The schedule (format: docs/schedules.md)."),
    trace: Optional[str] = TRACE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Replay a schedule against its trace: every input resident, the budget held at every event,
    every output made. Prints the peak, the clock and the overhead. With neither --ratio nor
    --budget-bytes the budget is the one the schedule's header names."""
    from ..sim.simulate import budget_of, check_budget_bytes, parse_ratio
    from ..trace import load_one
    from ..schedule.check import HEADER, ScheduleError, check_schedule
    from ..schedule.format import ScheduleFileError, read_schedule_lines

    if ratio is not None and budget_bytes is not None:
        raise UsageError("give at most one of --ratio and --budget-bytes")
    if ratio is not None:
        parse_ratio(ratio)
    if budget_bytes is not None:
        check_budget_bytes(budget_bytes)
    schedule, lines = read_schedule_lines(path)
    program = load_one(source, trace) if trace is not None else _program_for(source, schedule.trace_sha256)
    given = ratio is not None or budget_bytes is not None
    budget = budget_of(program, ratio, budget_bytes) if given else schedule.budget_bytes
    try:
        replay = check_schedule(program, schedule, budget)
    except ScheduleError as exc:
        i = exc.event_index
        line = 1 if i == HEADER or not lines else lines[min(i, len(lines) - 1)]
        raise ScheduleFileError(path, line, str(exc)) from None
    out = {"valid": True, "trace": program.name, "made_by": schedule.made_by, "budget_bytes": budget,
           "budget_from": "--ratio" if ratio is not None else "--budget-bytes" if budget_bytes is not None
           else "the schedule's header", "ratio": ratio, "events": len(schedule), **replay.to_dict()}
    if as_json:
        print_json(out)
        return
    from rich.table import Table

    table = Table(title=f"{path}: valid", title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    budget_text = "unbounded" if budget is None else f"{budget:,} B"
    rows = (("trace", program.name), ("made by", schedule.made_by), ("budget", f"{budget_text} ({out['budget_from']})"), ("peak", f"{replay.peak_bytes:,} B"),
            ("clock", f"{replay.clock_ns:,} ns"), ("overhead", overhead_text(replay.overhead, 6)),
            ("events", f"{len(schedule):,}"), ("  first computations", f"{replay.n_compute:,}"),
            ("  recomputations", f"{replay.n_recompute:,} ({replay.remat_ns:,} ns)"),
            ("  frees", f"{replay.n_free:,}"))
    for label, value in rows:
        table.add_row(label, value)
    console().print(table)


def _program_for(source: str, sha256: str):
    """The one trace of SOURCE, or among several the one the schedule is for (by its sha256)."""
    from ..trace import load

    programs = load(source)
    if len(programs) == 1:
        return programs[0]
    for program in programs:
        if program.sha256 == sha256:
            return program
    raise UsageError(f"{source}: none of its {len(programs)} traces has the schedule's sha256 {sha256[:12]}... "
                     "(pick one with --trace to see why)")


_GROUP_HELP = "Schedules as data: check one against its trace (docs/schedules.md)."


def _group(ctx: typer.Context) -> None:
    """Schedules as data: check one against its trace (docs/schedules.md)."""
    # A bare `dtrlab schedule` asks what there is: help on stdout, exit 0 (as `dtrlab trace`).
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def register(app: typer.Typer) -> None:
    """Add the `schedule` group (check) to the dtrlab app."""
    group = typer.Typer(cls=TyperGroup, help=_GROUP_HELP, invoke_without_command=True)
    group.callback()(_group)
    group.command("check")(check_cmd)
    app.add_typer(group, name="schedule")
