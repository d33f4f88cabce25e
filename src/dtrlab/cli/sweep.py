"""The sweep commands: `dtrlab sweep`, `dtrlab results export` and `salvage`, added to the CLI by `register(app)`.

A thin layer: parse and check the options, then call grid, run and store.
"""

from __future__ import annotations

from enum import Enum
from typing import List, Optional

import typer
from typer.core import TyperGroup

from ..errors import UsageError
from .optimal import BOUND_ONLY_OPT, GAP_OPT, SOLVER_OPT, TIME_LIMIT_OPT, SolverName, settings_given
from ..optimal.defaults import OPTIMAL_POLICY
from .options import (ENGINE_OPT, JSON_OPT, OVERHEAD_LIMIT_OPT, POLICIES_FILE_OPT, RUNTIME_HELP, SEED_OPT,  # noqa: F401
                       SOURCE_ARG, TRACES_LIST_OPT, TRACES_OPT, WORKERS_OPT, EngineName, policy_list_opt,
                       ratios_opt)
from ..output import console, print_json
from ..defaults import DEFAULT_POLICY
from ..defaults import DEFAULT_RUNTIME
from ..trace import resolve_source
from ..sweep import DEFAULT_STORE

DEFAULT_REFINE_FACTOR = 1.05


class ExecutorName(str, Enum):
    local = "local"
    dask = "dask"


# How a command that runs many simulations runs them; shared by sweep and rank.
EXECUTOR_OPT = typer.Option(ExecutorName.local, "--executor", "-e",
                            help="local: worker processes here; dask: a Dask cluster.")
SCHEDULER_OPT = typer.Option(None, "--scheduler", metavar="ADDR",
                             help="Dask scheduler address (tcp://host:8786); without it "
                                  "--executor dask starts a local cluster.")
STORE_OPT = typer.Option(DEFAULT_STORE, "--store", "-s", metavar="FILE",
                         help="The DuckDB results file; runs already in it are not simulated again.")
TIMEOUT_OPT = typer.Option(None, "--timeout", metavar="S",
                           help="Stop a run after S seconds (outcome timeout); its process is killed.")


class ExportFormat(str, Enum):
    parquet = "parquet"
    csv = "csv"


def sweep(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[List[str]] = TRACES_LIST_OPT,
    ratios: Optional[str] = ratios_opt(),
    budget_bytes: Optional[str] = typer.Option(None, "--budget-bytes", "-b", metavar="LIST",
                                               help="Budgets in bytes: a list and/or ranges START:STOP:STEP."),
    policy: Optional[List[str]] = policy_list_opt(f"; default: {DEFAULT_POLICY}. Or {OPTIMAL_POLICY}: the solver's "
                                                  "best schedule and a lower bound, one solve a budget "
                                                  "(docs/optimal.md)."),
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: Optional[List[str]] = typer.Option(None, "--runtime", metavar="R",
                                                help=RUNTIME_HELP + " Repeatable; default: " + DEFAULT_RUNTIME + "."),
    store: str = STORE_OPT,
    executor: ExecutorName = EXECUTOR_OPT,
    scheduler: Optional[str] = SCHEDULER_OPT,
    workers: Optional[int] = WORKERS_OPT,
    timeout: Optional[float] = TIMEOUT_OPT,
    overhead_limit: Optional[float] = OVERHEAD_LIMIT_OPT,
    refine: int = typer.Option(0, "--refine", metavar="K",
                               help="Then add K ratios between neighbours whose outcome differs or whose "
                                    "overheads differ by more than --refine-factor."),
    refine_factor: float = typer.Option(DEFAULT_REFINE_FACTOR, "--refine-factor", metavar="F",
                                        help="Overheads differing by more than this factor call for refinement."),
    refine_rounds: int = typer.Option(1, "--refine-rounds", metavar="N",
                                      help="Rounds of refinement (each looks at all results so far)."),
    seed: int = SEED_OPT,
    time_limit: float = TIME_LIMIT_OPT,
    solver: SolverName = SOLVER_OPT,
    gap: float = GAP_OPT,
    bound_only: bool = BOUND_ONLY_OPT,
    engine: EngineName = ENGINE_OPT,
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar and no summary table."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Read and lower the traces anew in this process."),
    as_json: bool = JSON_OPT,
) -> None:
    """Run every (trace, policy, runtime, budget) of a grid and store each result as it finishes.

    Run it again to resume: what the store has is skipped.
    """
    source = resolve_source(source, traces)
    from ..sim.policyfile import policies_given
    from ..sim.runtimes import get_runtime
    from ..trace import load
    from ..sweep.executors import get_executor
    from ..sweep.grid import build_specs, is_optimal, parse_budget_bytes, parse_ratios
    from ..sweep.run import interrupted_exit_status, refine_rounds as refinement, run_sweep
    from ..sweep.store import Store

    if ratios is None and budget_bytes is None:
        raise UsageError("give budgets: --ratios SPEC and/or --budget-bytes LIST")
    # Check everything cheap before reading traces: a typo should not wait for a large file.
    ratio_values = parse_ratios(ratios) if ratios is not None else ()
    byte_values = parse_budget_bytes(budget_bytes) if budget_bytes is not None else ()
    # The solver is asked for by name among the policies; the rest are eviction policies.
    asked = list(policy or ())
    solving = any(is_optimal(p) for p in asked)
    settings = settings_given(time_limit, solver, gap, bound_only)  # checked even when not solving
    rest = [p for p in asked if not is_optimal(p)]
    policies = policies_given(rest, policies_file, ()) if solving else policies_given(rest, policies_file)
    policies += [OPTIMAL_POLICY] if solving else []
    runtimes = list(runtime) if runtime else [DEFAULT_RUNTIME]
    for r in runtimes:
        get_runtime(r)
    if refine < 0:
        raise UsageError(f"--refine must be 0 or more, got {refine}")
    if refine and not ratio_values:
        raise UsageError("--refine adds ratios between ratios: give --ratios")
    if refine_rounds < 1:
        raise UsageError(f"--refine-rounds must be at least 1, got {refine_rounds}")
    if executor is ExecutorName.local and scheduler is not None:
        raise UsageError("--scheduler is for --executor dask")
    programs = load(source, list(trace) if trace else None, cache=not no_cache)
    specs = build_specs(source, programs, policies, runtimes, ratio_values, byte_values,
                        overhead_limit=overhead_limit, seed=seed, engine=engine.value, solve=settings)
    # The executor first: an unreachable scheduler must not leave a new, empty store behind.
    with get_executor(executor.value, workers, scheduler) as ex, Store(store) as opened:
        quiet = no_progress or as_json
        summary = run_sweep(specs, opened, ex, timeout_s=timeout, progress=not quiet,
                            report=not quiet and not refine)
        if refine and not summary.interrupted:
            refined = refinement(
                specs, opened, {p.sha256: p for p in programs}, refine, refine_factor, refine_rounds,
                lambda every, new: run_sweep(every, opened, ex, timeout_s=timeout, progress=not quiet,
                                             report=False),
                lambda round_, n: typer.echo(f"refinement round {round_}: {n} new budgets", err=True))
            summary = refined.summary or summary
        if refine and not quiet:
            from ..sweep.run import summary_table

            console().print(summary_table(summary))
    if as_json:
        print_json({"store": str(store), "total": summary.total, "skipped": summary.skipped, "ran": summary.ran,
                    "missing": summary.missing, "wall_s": round(summary.wall_s, 3), "lost": list(summary.lost),
                    "rows": [dict(r.__dict__) for r in summary.rows]})
    if summary.interrupted:
        raise typer.Exit(interrupted_exit_status(summary.stop_signal))
    if ex.lost:  # said run by run above; not the user's mistake, but not a whole sweep either
        raise typer.Exit(1)


def export_results(
    store: str = typer.Option(DEFAULT_STORE, "--store", "-s", metavar="FILE", help="The DuckDB results file."),
    fmt: ExportFormat = typer.Option(..., "--format", "-f", help="parquet or csv."),
    out: Optional[str] = typer.Option(None, "--out", "-o", metavar="FILE",
                                      help="Write here (CSV without it goes to stdout)."),
) -> None:
    """One row per run: trace, policy, runtime, ratio, budget_bytes, outcome, overhead, counters."""
    from ..sweep.store import export

    rows = export(store, fmt.value, out)
    if out is not None:
        typer.echo(f"{rows} runs written to {out}", err=True)


def salvage_results(
    store: str = typer.Option(..., "--store", "-s", metavar="FILE",
                              help="The damaged DuckDB results file (only read)."),
    out: str = typer.Option(..., "--out", "-o", metavar="NEW", help="The new store to write (must not exist)."),
) -> None:
    """Copy every run that can still be read from a store whose write-ahead log is damaged into a new store."""
    from ..sweep.store import salvage

    kept = salvage(store, out)
    typer.echo(f"{kept.runs} runs written to {out} (the log replayed up to byte {kept.log_bytes_kept} "
               f"of {kept.log_bytes}; {store} is unchanged)", err=True)


def register(app: typer.Typer) -> None:
    """Add `sweep` and the `results` group to the dtrlab app."""
    app.command("sweep")(sweep)
    results = typer.Typer(cls=TyperGroup, help="Read the results store.", no_args_is_help=True)
    results.command("export")(export_results)
    results.command("salvage")(salvage_results)
    app.add_typer(results, name="results")
