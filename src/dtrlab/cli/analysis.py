"""The diagnostics commands: scan, explain-oom, compare, diverge, bisect, ablate.

A thin typer layer: each command parses, calls the analysis functions and prints text or JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

import typer

from ..errors import UsageError
from ..formats import overhead_text
from .options import (BYTES_OPT, JSON_OPT, POLICIES_FILE_OPT, POLICY_OPT, RATIO_OPT, RUNTIME_OPT,
                       SOURCE_ARG, TRACE_OPT, TRACES_OPT)
from ..output import console as _console
from ..output import NONE_FOUND, print_findings, print_json
from ..defaults import DEFAULT_POLICY
from ..defaults import BUDGET_NOTATION, DEFAULT_RUNTIME, DEFAULT_SWITCH_FACTOR
from .options import (ENGINE_OPT, JSON_LIST_OPT, OVERHEAD_LIMIT_OPT, SEED_OPT, TRACES_LIST_OPT, WORKERS_OPT, EngineName,
                      policy_list_opt, ratios_opt)
from .sweep import EXECUTOR_OPT, SCHEDULER_OPT, STORE_OPT, TIMEOUT_OPT, ExecutorName
from ..trace import resolve_source

if TYPE_CHECKING:
    from rich.progress import Progress



def _progress() -> Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # On stderr, and only on a terminal: JSON on stdout stays clean and tests see no bars.
    err = _console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err, transient=True, disable=not err.is_terminal)


def _policy(policy: Optional[str], policies_file: Optional[str]) -> str:
    from ..sim.policyfile import policy_given

    return policy_given(policy, policies_file)


def _load(source: str, trace: Optional[str], policy: str, runtime: str):
    from ..sim.simulate import load_for

    return load_for(source, trace, policy, runtime)


def _ratios(spec: str) -> tuple[float, ...]:
    from ..sweep.grid import parse_ratios

    return parse_ratios(spec)


# --- scan -------------------------------------------------------------------------------------


def scan_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    ratios: str = ratios_opt(...),
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = RUNTIME_OPT,
    factor: float = typer.Option(DEFAULT_SWITCH_FACTOR, "--factor", metavar="F",
                                 help="A switch: neighbouring feasible overheads differing by more than F."),
    as_json: bool = JSON_OPT,
    store: str = STORE_OPT,
    workers: Optional[int] = WORKERS_OPT,
    overhead_limit: Optional[float] = OVERHEAD_LIMIT_OPT,
    timeout: Optional[float] = TIMEOUT_OPT,
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    mechanisms: bool = typer.Option(False, "--mechanisms",
                                    help="Also measure each switch's and inversion's mechanism (churn, frontier, "
                                         "both, neither) in one table; replays each OOM on the Python engine."),
) -> None:
    """Simulate each ratio (through the results store), then report regime switches and inversions."""
    source = resolve_source(source, traces)
    policy = _policy(policy, policies_file)
    from rich.table import Table
    from ..analysis.feasibility import inversions, overhead_inversions
    from ..analysis.regimes import regimes, switches
    from ..analysis.scan import scan_stored

    if not factor > 1:
        raise UsageError(f"--factor must exceed 1, got {factor}")
    grid = _ratios(ratios)
    program = _load(source, trace, policy, runtime)
    runs = scan_stored(source, program, grid, policy, runtime, store=store, workers=workers,
                       timeout_s=timeout, overhead_limit=overhead_limit, progress=not as_json, seed=seed,
                       engine=engine.value)
    found = switches(runs, factor)
    inv = inversions(runs)
    oinv = overhead_inversions(runs)
    sigs = None
    if mechanisms:
        from ..analysis.mechanism import measure

        sigs = measure(program, found, inv, policy, runtime, overhead_limit)
    if as_json:
        extra = {} if sigs is None else {"mechanisms": [s.to_dict() for s in sigs]}
        print_json({"trace": program.name, "policy": policy, "runtime": runtime, "factor": factor,
               "runs": [r.to_dict() for r in runs],
               "regime_switches": [s.to_dict() for s in found],
               "regimes": [g.to_dict() for g in regimes(runs, factor)],
               "inversions": [i.to_dict() for i in inv],
               "overhead_inversions": [o.to_dict() for o in oinv], **extra})
        return
    console = _console()
    n_ok = sum(r.feasible for r in runs)
    console.print(f"{program.name}: {policy} / {runtime}, {len(runs)} budgets, {n_ok} feasible")
    table = Table(title=f"regime switches (factor > {factor:g})", title_justify="left")
    for col in ("fast ratio", "slow ratio", "fast overhead", "slow overhead", "factor", "larger is slower"):
        table.add_column(col, justify="right")
    for s in found:
        table.add_row(s.fast.label, s.slow.label, overhead_text(s.fast.overhead, 4), overhead_text(s.slow.overhead, 4),
                      f"{s.factor:.3f}", "yes" if s.upward else "no")
    print_findings(console, table)
    table = Table(title="feasibility inversions", title_justify="left")
    for col in ("last feasible", "infeasible", "next feasible"):
        table.add_column(col, justify="right")
    for i in inv:
        bad = i.infeasible
        span = bad[0].label if len(bad) == 1 else f"{bad[0].label} .. {bad[-1].label} ({len(bad)})"
        table.add_row(i.last_feasible.label, span, i.next_feasible.label)
    print_findings(console, table)
    if oinv:
        worst = max(oinv, key=lambda o: o.factor)
        console.print(f"overhead inversions: {len(oinv)}; worst: {worst.worst.label} pays "
                      f"{overhead_text(worst.worst.overhead, 4)} vs {overhead_text(worst.smaller.overhead, 4)} "
                      f"at {worst.smaller.label} (x{worst.factor:.3f})")
    if sigs is not None:
        print_findings(console, _mechanism_table(sigs))


def _mechanism_table(sigs):
    """One row per switch and inversion: both runs' churn, the unstable run's frontier, the flip."""
    from rich.table import Table
    from ..analysis.mechanism import MECHANISM_COLUMNS, mechanism_row

    table = Table(title="mechanisms (reference run / unstable run)", title_justify="left")
    for col in MECHANISM_COLUMNS:
        table.add_column(col, justify="left" if col in ("kind", "mechanism", "flipped by") else "right")
    for s in sigs:
        table.add_row(*mechanism_row(s))
    return table


# --- explain-oom ------------------------------------------------------------------------------


def explain_oom_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = RUNTIME_OPT,
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Why a run runs out of memory: the pending stack and what holds each resident byte."""
    source = resolve_source(source, traces)
    policy = _policy(policy, policies_file)
    from ..sim.simulate import budget_of, check_budget_args
    from ..analysis.oom import explain_oom, format_oom

    check_budget_args(ratio, budget_bytes)
    program = _load(source, trace, policy, runtime)
    budget = budget_of(program, ratio, budget_bytes)
    report = explain_oom(program, budget, policy, runtime, engine=engine.value, seed=seed)
    if as_json:
        d = report.to_dict()
        d["ratio"] = ratio
        print_json(d)
        return
    typer.echo(format_oom(report))


# --- e* drift --------------------------------------------------------------------------------------


def estar_drift_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    policy: str = typer.Option(DEFAULT_POLICY, "--policy", "-p", help="A policy that reads e* (dtr, msps, ab-e-*)."),
    runtime: str = typer.Option(DEFAULT_RUNTIME, "--runtime", help="An optimized runtime."),
    seed: int = SEED_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """How often the reference's incremental e* differs from a fresh traversal in one run."""
    source = resolve_source(source, traces)
    from ..sim.simulate import budget_of, check_budget_args
    from ..analysis.estar import neighborhood_drift

    check_budget_args(ratio, budget_bytes)
    program = _load(source, trace, policy, runtime)
    drift = neighborhood_drift(program, budget_of(program, ratio, budget_bytes), policy, runtime, seed=seed)
    if as_json:
        print_json({"trace": program.name, "policy": policy, "runtime": runtime, "ratio": ratio, **drift.to_dict()})
        return
    typer.echo(f"{program.name}: {policy} / {runtime} ({drift.outcome}): {drift.differing:,} of "
               f"{drift.evaluations:,} scores ({100 * drift.fraction:.2f}%) read an incremental e* "
               f"that a fresh traversal disagrees with ({drift.lower:,} lower, {drift.higher:,} higher)")
    if drift.first is not None:
        f = drift.first
        typer.echo(f"first at clock {f.clock_ns:,} ns on {f.storage}: incremental forward/reverse "
                   f"{f.incremental_forward_ns:,}/{f.incremental_reverse_ns:,} ns, fresh "
                   f"{f.fresh_forward_ns:,}/{f.fresh_reverse_ns:,} ns")


# --- two budgets: compare, diverge, bisect -------------------------------------------------------

BETWEEN_HELP = "Two budgets: " + BUDGET_NOTATION + "."


def _two(source, trace, policy, runtime, between):
    from ..analysis.scan import parse_budget

    program = _load(source, trace, policy, runtime)
    a, b = (parse_budget(program, x) for x in between)
    return program, a, b


def compare_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    between: Tuple[str, str] = typer.Option(..., "--between", metavar="A B", help=BETWEEN_HELP),
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = RUNTIME_OPT,
    top: int = typer.Option(10, "--top", metavar="N", help="How many re-evicted storages to list."),
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    plot: Optional[str] = typer.Option(None, "--plot", metavar="OUT.png",
                                       help="Draw both runs over the simulated clock (memory, recompute, evictions) "
                                            "with their first divergent eviction marked."),
    as_json: bool = JSON_OPT,
) -> None:
    """Compare two budgets' runs storage by storage: evictions, re-evictions, extra recompute."""
    source = resolve_source(source, traces)
    policy = _policy(policy, policies_file)
    from rich.table import Table
    from ..analysis.churn import compare_runs

    program, a, b = _two(source, trace, policy, runtime, between)
    churn = compare_runs(program, a, b, policy, runtime, top, seed=seed, engine=engine.value)
    if plot:
        from ..timeline.switchplot import draw_switch

        typer.echo(f"figure: {draw_switch(program, a, b, policy, runtime, plot)}", err=True)
    if as_json:
        print_json(churn.to_dict())
        return
    table = Table(title=f"{program.name}: {policy} / {runtime}", title_justify="left")
    table.add_column("")
    for side in (churn.a, churn.b):
        table.add_column(side.budget.label, justify="right")
    rows = [("outcome", lambda r: r.outcome), ("overhead", lambda r: overhead_text(r.overhead, 4)),
            ("recompute ns", lambda r: f"{r.remat_ns:,}")]
    for label, attr in (("evictions", "evictions"), ("distinct evicted", "distinct_evicted"),
                        ("evictions / evicted storage", "per_evicted_storage")):
        rows.append((f"{label} (all)", lambda r, a=attr: f"{getattr(r, a).all:,.3g}" if isinstance(getattr(r, a).all, float) else f"{getattr(r, a).all:,}"))
        rows.append((f"{label} (policy)", lambda r, a=attr: f"{getattr(r, a).policy:,.3g}" if isinstance(getattr(r, a).policy, float) else f"{getattr(r, a).policy:,}"))
    for label, fn in rows:
        table.add_row(label, fn(churn.a), fn(churn.b))
    console = _console()
    console.print(table)
    console.print(f"Jaccard of evicted sets: all {churn.jaccard.all:.3f}, policy {churn.jaccard.policy:.3f}")
    console.print(f"the slower run ({churn.slower}) recomputes {churn.extra_remat_ns:,} ns more; "
                  f"its {len(churn.top)} most re-evicted storages account for {churn.top_extra_ns:,} ns")
    t = Table(title="most re-evicted storages of the slower run", title_justify="left")
    for col in ("storage", "name", "policy a", "policy b", "all a", "all b", "remat a", "remat b", "extra ns"):
        t.add_column(col, justify="right", no_wrap=col in ("storage", "name", "extra ns"))
    for s in churn.top:
        t.add_row(str(s.storage), s.name, str(s.policy_a), str(s.policy_b), str(s.all_a), str(s.all_b),
                  str(s.remat_a), str(s.remat_b), f"{s.extra_recompute_ns:,}")
    print_findings(console, t)


def diverge_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    between: Tuple[str, str] = typer.Option(..., "--between", metavar="A B", help=BETWEEN_HELP),
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = RUNTIME_OPT,
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """The first policy eviction where two budgets' runs differ, and both candidates' score terms."""
    source = resolve_source(source, traces)
    policy = _policy(policy, policies_file)
    from rich.table import Table
    from ..analysis.divergence import diverge

    program, a, b = _two(source, trace, policy, runtime, between)
    d = diverge(program, a, b, policy, runtime, engine=engine.value, seed=seed)
    if as_json:
        print_json(d.to_dict())
        return
    console = _console()
    if d.index is None:
        console.print(f"the two runs make the same {d.evictions_a} policy evictions")
        return
    console.print(f"{program.name}: the runs share {d.index} policy evictions, then part "
                  f"({d.evictions_a} and {d.evictions_b} in all)")
    for c in (d.a, d.b):
        if c.clock_ns is None:
            console.print(f"  {c.budget.label}: no further policy eviction")
            continue
        console.print(f"  {c.budget.label}: at clock {c.clock_ns:,} ns (memory {c.memory_bytes:,} B) evicts "
                      f"storage {c.chosen}")
        t = Table(show_header=True)
        for col in ("storage", "name", "in pool", "compute ns", "e* ns", "size B", "staleness ns", "score"):
            t.add_column(col, justify="right")
        for x in c.candidates:
            t.add_row(str(x.storage), x.name, "yes" if x.in_pool else "no", f"{x.compute_ns:,}",
                      f"{x.neighborhood_ns:,}", f"{x.size_bytes:,}", f"{x.staleness_ns:,}", f"{x.score:.6g}")
        console.print(t)


def bisect_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    between: Tuple[str, str] = typer.Option(..., "--between", metavar="A B", help=BETWEEN_HELP),
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = RUNTIME_OPT,
    max_runs: int = typer.Option(2000, "--max-runs", metavar="N", help="Stop refining after N simulations."),
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """Bisect on bytes between two budgets whose outcome or regime differ, to boundaries 1 byte apart."""
    source = resolve_source(source, traces)
    policy = _policy(policy, policies_file)
    from rich.table import Table
    from ..analysis.bisect import bisect_budgets

    program, a, b = _two(source, trace, policy, runtime, between)
    if a.budget_bytes == b.budget_bytes:
        raise UsageError("the two budgets are the same number of bytes")
    try:
        found = bisect_budgets(program, a.budget_bytes, b.budget_bytes, policy, runtime, max_runs=max_runs,
                               seed=seed, engine=engine.value,
                               lo_ratio=a.ratio, hi_ratio=b.ratio)
    except ValueError as exc:
        raise UsageError(f"{exc} (the two runs have the same outcome, and it is not ok)") from None
    if as_json:
        print_json(found.to_dict())
        return
    console = _console()
    if not found.boundaries:
        console.print(f"boundaries by {found.mode} between the two budgets: {NONE_FOUND} (they behave alike)")
        return
    note = "" if found.monotone else " (not monotone: more than one change on the way)"
    console.print(f"{program.name}: {len(found.boundaries)} boundaries by {found.mode} after "
                  f"{len(found.runs)} runs{note}" + ("" if found.complete else "; stopped at --max-runs"))
    t = Table()
    for col in ("below B", "class", "overhead", "above B", "class", "overhead", "1 byte apart"):
        t.add_column(col, justify="right")
    for x in found.boundaries:
        t.add_row(f"{x.lo.budget_bytes:,}", x.lo_class, overhead_text(x.lo.overhead, 4),
                  f"{x.hi.budget_bytes:,}", x.hi_class, overhead_text(x.hi.overhead, 4), "yes" if x.adjacent else "no")
    console.print(t)


def ablate_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    ratios: str = ratios_opt(...),
    runtime: str = RUNTIME_OPT,
    factor: float = typer.Option(DEFAULT_SWITCH_FACTOR, "--factor", metavar="F", help="Switch factor."),
    policy: Optional[List[str]] = policy_list_opt(": rows after the ablations."),
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    as_json: bool = JSON_LIST_OPT,
) -> None:
    """Every ablation policy (ab-*) over the ratios, then any --policy: which show switches or inversions."""
    source = resolve_source(source, traces)
    from rich.table import Table
    from ..sim.policies import ablation_policies
    from ..sim.policyfile import policies_given
    from ..analysis.ablation import ablate

    names = list(dict.fromkeys([p.name for p in ablation_policies()] + policies_given(policy, policies_file, ())))

    if not factor > 1:
        raise UsageError(f"--factor must exceed 1, got {factor}")
    grid = _ratios(ratios)
    program = _load(source, trace, DEFAULT_POLICY, runtime)
    with _progress() as bar:
        task = bar.add_task(f"{program.name} ablations", total=len(names) * len(grid))
        rows = ablate(program, grid, runtime, factor, names, advance=lambda: bar.advance(task), seed=seed,
                      engine=engine.value)
    if as_json:
        print_json([r.to_dict() for r in rows])
        return
    t = Table(title=f"{program.name}: ablations over {len(grid)} ratios (switch factor > {factor:g})",
              title_justify="left")
    for col in ("policy", "feasible", "smallest feasible", "switches", "largest factor", "inversions",
                "infeasible inside"):
        t.add_column(col, justify="right", no_wrap=col == "policy")
    for r in rows:
        t.add_row(r.policy, f"{r.feasible}/{r.runs}", "-" if r.min_feasible_ratio is None else f"{r.min_feasible_ratio:g}",
                  str(r.switches), "-" if r.max_factor is None else f"{r.max_factor:.3f}", str(r.inversions),
                  str(r.infeasible_inside))
    print_findings(_console(), t)


# --- rank ---------------------------------------------------------------------------------------


def rank_cmd(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[List[str]] = TRACES_LIST_OPT,
    policy: Optional[List[str]] = policy_list_opt("; default: the DTR paper's seven and dtrlab's remedies."),
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    ratios: str = ratios_opt(None, " The grid the mean overhead is taken over (default: the paper's 0.1:1.0:0.1)."),
    fine: Optional[List[str]] = typer.Option(None, "--fine", metavar="[NAME=]SPEC",
                                             help="Fine-scan ratios added to the stability figures, e.g. "
                                                  "0.090:0.120:0.001, or lstm=0.26:0.34:0.001 for the traces whose "
                                                  "name starts with lstm (repeatable; default: none, the grid alone)."),
    runtime: str = RUNTIME_OPT,
    factor: float = typer.Option(DEFAULT_SWITCH_FACTOR, "--factor", metavar="F",
                                 help="A switch: neighbouring feasible overheads differing by more than F."),
    store: str = STORE_OPT,
    executor: ExecutorName = EXECUTOR_OPT,
    scheduler: Optional[str] = SCHEDULER_OPT,
    workers: Optional[int] = WORKERS_OPT,
    overhead_limit: Optional[float] = OVERHEAD_LIMIT_OPT,
    timeout: Optional[float] = TIMEOUT_OPT,
    plot: Optional[str] = typer.Option(None, "--plot", metavar="OUT.png", help="Write the overhead curves here."),
    seed: int = SEED_OPT,
    engine: EngineName = ENGINE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """A leaderboard: each policy's mean overhead over a grid, smallest feasible ratio, and stability."""
    source = resolve_source(source, traces)
    from rich.table import Table
    from ..defaults import COARSE_RATIOS, PAPER_POLICIES
    from ..sim.policies import REMEDY_POLICIES
    from ..sim.policyfile import policies_given
    from ..trace import load
    from ..analysis.rank import ALL_TRACES, figure, fine_scans, leaderboard, rank_runs, save_figure

    if not factor > 1:
        raise UsageError(f"--factor must exceed 1, got {factor}")
    if executor is ExecutorName.local and scheduler is not None:
        raise UsageError("--scheduler is for --executor dask")
    grid = _ratios(ratios or COARSE_RATIOS)
    fine_ratios = fine_scans(fine or ())
    names = policies_given(policy, policies_file, (*PAPER_POLICIES, *REMEDY_POLICIES))
    programs = load(source, list(trace) if trace else None)
    frame, shown, summary = rank_runs(source, programs, names, grid, fine_ratios, store=store, executor=executor.value,
                                      workers=workers, scheduler=scheduler, runtime=runtime,
                                      overhead_limit=overhead_limit, timeout_s=timeout, progress=not as_json,
                                      seed=seed, engine=engine.value)
    if summary.interrupted:
        from ..sweep.run import interrupted_exit_status, interrupted_message

        typer.echo(interrupted_message(summary), err=True)
        raise typer.Exit(interrupted_exit_status(summary.stop_signal))
    rows = leaderboard(frame, grid, shown, factor)
    if plot:
        typer.echo(f"figure: {save_figure(figure(frame, shown), plot)}", err=True)
    if as_json:
        print_json({"grid": list(grid), "fine": {k: list(v) for k, v in fine_ratios.items()}, "runtime": runtime, "factor": factor,
                    "overhead_limit": overhead_limit, "runs_new": summary.ran, "runs_stored": summary.skipped,
                    "rows": [r.to_dict() for r in rows]})
        return
    table = Table(title=f"policies ranked over {len(programs)} traces: grid {ratios or COARSE_RATIOS}"
                        + (f", fine {' '.join(fine)}" if fine else "") + f" ({summary.ran} runs new, {summary.skipped} stored)",
                  title_justify="left")
    for col in ("policy", "trace", "feasible", "mean overhead", "smallest feasible", "budgets",
                f"switches > {factor:g}x", "largest factor", "inversions"):
        table.add_column(col, justify="left" if col in ("policy", "trace") else "right",
                         no_wrap=col in ("policy", "trace"))
    for r in rows:
        style = "bold" if r.trace == ALL_TRACES else None
        table.add_row(r.policy, r.trace, f"{r.grid_feasible}/{r.grid_runs}", overhead_text(r.mean_overhead, 4),
                      "-" if r.min_feasible_ratio is None else f"{r.min_feasible_ratio:g}", str(r.budgets),
                      str(r.switches), "-" if r.max_neighbour_factor is None else f"{r.max_neighbour_factor:.3f}",
                      str(r.inversions), style=style,
                      end_section=r.trace == ALL_TRACES)
    print_findings(_console(), table)


def register(app: typer.Typer) -> None:
    app.command("scan")(scan_cmd)
    app.command("explain-oom")(explain_oom_cmd)
    app.command("compare")(compare_cmd)
    app.command("diverge")(diverge_cmd)
    app.command("bisect")(bisect_cmd)
    app.command("ablate")(ablate_cmd)
    app.command("estar-drift")(estar_drift_cmd)
    app.command("rank")(rank_cmd)
