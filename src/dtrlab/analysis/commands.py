"""The diagnostics commands: scan, explain-oom, compare, diverge, bisect, ablate.

A thin typer layer: each command parses, calls the analysis functions and prints text or JSON.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import UsageError

SOURCE_HELP = "A trace file, a folder with manifest.json, or a logs.zip."
TRACE_HELP = "The trace whose name starts with NAME (needed when SOURCE holds several)."


def _clean(value: Any) -> Any:
    """JSON has no inf/nan: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _json(value: Any) -> None:
    typer.echo(json.dumps(_clean(value), indent=2, allow_nan=False))


def _console() -> Console:
    return Console(file=sys.stdout, highlight=False)


def _progress() -> Progress:
    # On stderr, and only on a terminal: JSON on stdout stays clean and tests see no bars.
    err = Console(file=sys.stderr)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True, disable=not err.is_terminal)


def _load(source: str, trace: Optional[str], policy: str, runtime: str):
    from ..sim.policies import get_policy
    from ..sim.runtimes import get_runtime
    from ..sim.simulate import check_compatible
    from ..trace import load_one

    # Names first: a typo should not wait for a large trace.
    check_compatible(get_policy(policy), get_runtime(runtime))
    return load_one(source, trace)


def _ratios(spec: str) -> tuple[float, ...]:
    from ..sweep.grid import parse_ratios

    return parse_ratios(spec)


def _fmt(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


# --- scan -------------------------------------------------------------------------------------


def scan_cmd(
    source: str = typer.Argument(..., help=SOURCE_HELP),
    trace: Optional[str] = typer.Option(None, "--trace", "-t", metavar="NAME", help=TRACE_HELP),
    ratios: str = typer.Option(..., "--ratios", "-r", metavar="SPEC",
                               help='Budget ratios: "START:STOP:STEP" (inclusive) or a comma list.'),
    policy: str = typer.Option("dtr", "--policy", "-p", help="Eviction policy."),
    runtime: str = typer.Option("eager-optimized", "--runtime", help="Runtime."),
    factor: float = typer.Option(2.0, "--factor", metavar="F",
                                 help="A switch: neighbouring feasible overheads differing by more than F."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Simulate each ratio, then report regime switches and feasibility inversions."""
    from .feasibility import inversions, overhead_inversions
    from .regimes import regimes, switches
    from .scan import scan

    if not factor > 1:
        raise UsageError(f"--factor must exceed 1, got {factor}")
    grid = _ratios(ratios)
    program = _load(source, trace, policy, runtime)
    with _progress() as bar:
        task = bar.add_task(f"{program.name} {policy}", total=len(grid))
        runs = scan(program, grid, policy, runtime, advance=lambda: bar.advance(task))
    found = switches(runs, factor)
    inv = inversions(runs)
    oinv = overhead_inversions(runs)
    if as_json:
        _json({"trace": program.name, "policy": policy, "runtime": runtime, "factor": factor,
               "runs": [r.to_dict() for r in runs],
               "regime_switches": [s.to_dict() for s in found],
               "regimes": [g.to_dict() for g in regimes(runs, factor)],
               "inversions": [i.to_dict() for i in inv],
               "overhead_inversions": [o.to_dict() for o in oinv]})
        return
    console = _console()
    n_ok = sum(r.feasible for r in runs)
    console.print(f"{program.name}: {policy} / {runtime}, {len(runs)} budgets, {n_ok} feasible")
    table = Table(title=f"regime switches (factor > {factor:g})", title_justify="left")
    for col in ("fast ratio", "slow ratio", "fast overhead", "slow overhead", "factor", "larger is slower"):
        table.add_column(col, justify="right")
    for s in found:
        table.add_row(s.fast.label, s.slow.label, _fmt(s.fast.overhead), _fmt(s.slow.overhead),
                      f"{s.factor:.3f}", "yes" if s.upward else "no")
    console.print(table)
    table = Table(title="feasibility inversions", title_justify="left")
    for col in ("last feasible", "infeasible", "next feasible"):
        table.add_column(col, justify="right")
    for i in inv:
        bad = i.infeasible
        span = bad[0].label if len(bad) == 1 else f"{bad[0].label} .. {bad[-1].label} ({len(bad)})"
        table.add_row(i.last_feasible.label, span, i.next_feasible.label)
    console.print(table)
    if oinv:
        worst = max(oinv, key=lambda o: o.factor)
        console.print(f"overhead inversions: {len(oinv)}; worst: {worst.worst.label} pays {_fmt(worst.worst.overhead)} "
                      f"vs {_fmt(worst.smaller.overhead)} at {worst.smaller.label} (x{worst.factor:.3f})")


# --- explain-oom ------------------------------------------------------------------------------


def explain_oom_cmd(
    source: str = typer.Argument(..., help=SOURCE_HELP),
    trace: Optional[str] = typer.Option(None, "--trace", "-t", metavar="NAME", help=TRACE_HELP),
    ratio: Optional[float] = typer.Option(None, "--ratio", "-r", metavar="R", help="Budget as a ratio of the peak."),
    budget_bytes: Optional[int] = typer.Option(None, "--budget-bytes", "-b", metavar="B", help="Budget in bytes."),
    policy: str = typer.Option("dtr", "--policy", "-p", help="Eviction policy."),
    runtime: str = typer.Option("eager-optimized", "--runtime", help="Runtime."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Why a run runs out of memory: the pending stack and what holds each resident byte."""
    from ..sim.simulate import budget_from_ratio, parse_ratio
    from .oom import explain_oom, format_oom

    if (ratio is None) == (budget_bytes is None):
        raise UsageError("give exactly one of --ratio and --budget-bytes")
    if ratio is not None:
        parse_ratio(ratio)
    if budget_bytes is not None and budget_bytes < 0:
        raise UsageError(f"--budget-bytes must be a non-negative number of bytes, got {budget_bytes}")
    program = _load(source, trace, policy, runtime)
    budget = budget_from_ratio(program, ratio) if ratio is not None else budget_bytes
    report = explain_oom(program, budget, policy, runtime)
    if as_json:
        d = report.to_dict()
        d["ratio"] = ratio
        _json(d)
        return
    typer.echo(format_oom(report))


def register(app: typer.Typer) -> None:
    app.command("scan")(scan_cmd)
    app.command("explain-oom")(explain_oom_cmd)
