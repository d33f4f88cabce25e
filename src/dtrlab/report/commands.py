"""The `dtrlab reproduce` command: the whole study into a report folder; at the end, what it found.

A thin typer layer over report.pipeline.reproduce. The terminal's last screen, like the report's
first: what was found on the traces given, the claims, how to get the study's traces, what was new.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table


def _claims(repro):
    """The claims table; one line when no claim's trace is here (six rows saying so tell nothing)."""
    from .claims import NOT_APPLICABLE

    if all(c.verdict.startswith(NOT_APPLICABLE) for c in repro.claims):
        return (f"claims of the study: {len(repro.claims)} of {len(repro.claims)} {NOT_APPLICABLE} "
                "(they are about the public DTR traces; the report lists each)")
    table = Table(title="claims of the study", title_justify="left", show_lines=True)
    table.add_column("claim", max_width=48)
    table.add_column("kind")
    table.add_column("dtrlab measured", max_width=60)
    table.add_column("verdict")
    styles = {"reproduced": "green", "differs": "red"}
    for c in repro.claims:
        table.add_row(f"({c.key}) {c.statement}", c.kind, c.measured,
                      f"[{styles.get(c.verdict, 'dim')}]{c.verdict}[/]")
    return table


def reproduce_cmd(
    source: Optional[str] = typer.Argument(None, help="A folder or logs.zip of the public DTR traces "
                                                      "(default: the traces shipped with dtrlab)."),
    out: str = typer.Option("dtrlab-report", "--out", "-o", metavar="DIR", help="The report folder."),
    quick: bool = typer.Option(False, "--quick", help="A small version for CI (a few traces and budgets)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", metavar="N",
                                          help="Worker processes (default: one a core)."),
) -> None:
    """Reproduce the study: budget curves, fine scans, churn, OOMs, ablations; write a report."""
    from ..errors import UsageError
    from .pipeline import reproduce

    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    err = Console(file=sys.stderr)
    repro = reproduce(source, out, quick=quick, workers=workers, console=err, progress=err.is_terminal)
    from .claims import study_missing
    from .findings import found_line, found_on
    from .plan import SUBJECT_POLICY
    from .study import FETCH_AND_REPRODUCE
    from .write import new_runs_line

    console = Console(file=sys.stdout, highlight=False)
    console.print(_claims(repro))
    console.print("[bold]found on these traces[/bold]")
    for f in found_on(repro.curves, repro.traces, SUBJECT_POLICY):
        console.print(f"  {found_line(f)}", markup=False)
    if study_missing(repro.claims):
        console.print(f"The study's traces and claims: {FETCH_AND_REPRODUCE}", markup=False)
    console.print(f"{new_runs_line(repro)}; {repro.wall_s:.1f} s; report: {repro.out_dir / 'report.html'}",
                  markup=False)


def register(app: typer.Typer) -> None:
    app.command("reproduce")(reproduce_cmd)
