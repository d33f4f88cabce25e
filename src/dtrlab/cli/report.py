"""The `dtrlab reproduce` command: the whole study into a report folder; at the end, what it found.

A thin typer layer over report.pipeline.reproduce. The terminal's last screen, like the report's
first: what was found on the traces given, the claims, how to get the study's traces, what was new.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, List, Optional

import typer

from .optimal import GAP_OPT, SOLVER_OPT, TIME_LIMIT_OPT, SolverName
from ..defaults import REPORT_OVERHEAD_LIMIT
from .options import (ENGINE_OPT, JSON_OPT, OVERHEAD_LIMIT_HELP, POLICIES_FILE_OPT, SEED_OPT, TRACES_OPT, WORKERS_OPT,
                      EngineName, policy_list_opt)
from ..output import console, print_json
from ..trace import choose_source

if TYPE_CHECKING:
    from rich.table import Table


def _claims(repro) -> Table | str:
    """The claims table; one line when no claim's trace is here (six rows saying so tell nothing)."""
    from rich.table import Table

    from ..report.claims import NOT_APPLICABLE

    if all(c.verdict.startswith(NOT_APPLICABLE) for c in repro.claims):
        return (f"claims of the study: none of the {len(repro.claims)} applies to these traces "
                "(they are about the public DTR traces; the report says why for each)")
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
    traces: Optional[str] = TRACES_OPT,
    out: str = typer.Option("dtrlab-report", "--out", "-o", metavar="DIR", help="The report folder."),
    quick: bool = typer.Option(False, "--quick", help="A small version for CI (a few traces and budgets)."),
    workers: Optional[int] = WORKERS_OPT,
    overhead_limit: float = typer.Option(REPORT_OVERHEAD_LIMIT, "--overhead-limit", metavar="X",
                                         help=OVERHEAD_LIMIT_HELP),
    policy: Optional[List[str]] = policy_list_opt(": each joins the leaderboard."),
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    optimal: bool = typer.Option(False, "--optimal",
                                 help="Also solve each trace's coarse budgets and the study's windows with the "
                                      "optimal solver (--time-limit S a budget), for the baselines section."),
    time_limit: float = TIME_LIMIT_OPT,
    solver: SolverName = SOLVER_OPT,
    gap: float = GAP_OPT,
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    checkpointing: bool = typer.Option(False, "--checkpointing",
                                       help="Also run each zoo model's training step plain, checkpointed per block, "
                                            "with selective checkpointing, staged by DTR and compiled, and draw "
                                            "peak against step time with DTR's verdicts at matched memory (needs "
                                            "torch; takes several minutes)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Reproduce the study: budget curves, fine scans, churn, OOMs, ablations; write a report."""
    from ..errors import UsageError
    from ..report.claims import study_missing
    from ..report.findings import found_line, found_on
    from ..sim.policyfile import policies_given
    from ..report.pipeline import reproduce
    from ..report.plan import SUBJECT_POLICY
    from ..report.study import FETCH_AND_REPRODUCE
    from ..report.write import new_runs_line
    from .optimal import settings_given

    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    extra = tuple(policies_given(policy, policies_file, ()))  # a bad one is one line before any work
    settings = settings_given(time_limit, solver, gap, False) if optimal else None
    err = console(stderr=True)
    if not overhead_limit > 1:
        raise UsageError(f"--overhead-limit must exceed 1, got {overhead_limit}")
    repro = reproduce(choose_source(source, traces), out, quick=quick, workers=workers, console=err,
                      progress=True, policies=extra, optimal=settings, overhead_limit=overhead_limit,
                      seed=seed, engine=engine.value, checkpointing=checkpointing)
    compared = repro.checkpointing
    if as_json:
        record = {"report": str(repro.out_dir / "report.html"), "new_runs": repro.new_runs,
                  "runs": len(repro.frame), "new_solves": repro.new_solves, "wall_s": round(repro.wall_s, 3),
                  "claims": [c.to_dict() for c in repro.claims], "beside": [b.to_dict() for b in repro.beside],
                  "found": [found_line(f) for f in found_on(repro.curves, repro.traces, SUBJECT_POLICY)]}
        if compared is not None:
            record["checkpointing"] = [{**asdict(m), "step_ratio": m.step_ratio} for m in compared.matched]
        print_json(record)
        return
    out_console = console()
    out_console.print(_claims(repro))
    for b in repro.beside:
        out_console.print(f"beside claim ({b.key}), {b.trace}: {b.text}", markup=False)
    out_console.print("[bold]found on these traces[/bold]")
    for f in found_on(repro.curves, repro.traces, SUBJECT_POLICY):
        out_console.print(f"  {found_line(f)}", markup=False)
    if compared is not None:
        tally = "; ".join(f"{verdict}: {n}" for verdict, n in compared.tally.items())
        out_console.print(f"checkpointing at matched memory: {tally}" if compared.torch is not None else
                          "checkpointing: torch is not installed, so no step was compared", markup=False)
    if study_missing(repro.claims):
        out_console.print(f"The study's traces and claims: {FETCH_AND_REPRODUCE}", markup=False)
    out_console.print(f"{new_runs_line(repro)}; {repro.wall_s:.1f} s; report: {repro.out_dir / 'report.html'}",
                      markup=False)


def register(app: typer.Typer) -> None:
    app.command("reproduce")(reproduce_cmd)
