"""The whole optimal solve of one trace at one budget: the model, a solver, the schedule it implies, and
that schedule replayed by the schedule checker (whose overhead is the one reported, never the solver's).

Also the LP relaxation's bound alone, and the smallest budget any schedule can have (a lower bound).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..defaults import REPORT_OVERHEAD_LIMIT
from ..errors import UsageError
from ..schedule.check import Replay, check_schedule
from ..schedule.format import Schedule
from ..trace.lower import Program
from .bound import crossing_bound_ns
from .chain import best_chain_schedule
from .defaults import (CHAIN_MAKER, DEFAULT_GAP, DEFAULT_SOLVER, DEFAULT_THREADS, DEFAULT_TIME_LIMIT_S,
                       POLISH_SHARE, PORTFOLIO, SOLVERS, SolveSettings)
from .graph import ItemGraph, item_graph
from .model import Milp, build_milp
from .polish import polish
from .read import over_budget, schedule_from_solution
from .warm import start_of_schedule
from .solvers import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, SolverRun, solve_cpsat, solve_highs


# What a result is: an exact solve of the stage model (its schedule and its bound), the LP bound alone,
# or the crossing bound with the portfolio's best schedule (bound.py, portfolio_best: for traces too
# large for the model).
EXACT, LP_ONLY, CROSSING_ONLY = "exact", "lp-bound", "crossing-bound"


@dataclass(frozen=True)
class OptimalResult:
    """One budget's answer. overhead is the replay's; bound_overhead is proven for the stage model's
    schedules (docs/optimal.md says which); gap = (overhead - bound) / overhead."""

    trace: str
    budget_bytes: int
    kind: str  # EXACT or LP_ONLY
    solver: str
    # optimal (the bound meets the best), feasible (not proven best), infeasible (no schedule of the stage
    # model fits; none at all when bound_overhead is inf), unknown (none found in time)
    status: str
    overhead: float | None
    bound_overhead: float
    lp_bound_overhead: float | None
    crossing_bound_overhead: float | None  # bound.py's, part of bound_overhead
    gap: float | None
    solve_s: float
    lp_s: float | None
    n_binaries: int
    n_rows: int
    dtr_overhead: float | None  # DTR's own run at this budget (None: not run, or it ran out of memory)
    model_optimal: bool  # the last solve proved its schedule best among the stage model's (docs/optimal.md)
    rounds: int  # solves: the relaxation's, then one for each refinement of stages that crossed the budget
    exact_stages: int  # stages given exact rows
    replay: Replay | None
    schedule: Schedule | None
    polished_windows: int = 0  # windows of stages re-solved that made the start cheaper (polish.py)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("replay", "schedule")}
        d["peak_bytes"] = self.replay.peak_bytes if self.replay else None
        d["remat_ns"] = self.replay.remat_ns if self.replay else None
        d["n_recompute"] = self.replay.n_recompute if self.replay else None
        return d


def overhead_of(program: Program, remat_ns: float) -> float:
    """The overhead of a schedule recomputing `remat_ns`: the clock (from 1, as the simulator's) over compute."""
    return (1 + program.compute_ns + remat_ns) / program.compute_ns


def _solve(m: Milp, solver: str, time_limit_s: float, threads: int, abs_gap_ns: float, say,
           start: np.ndarray | None) -> SolverRun:
    if solver == "highs":
        return solve_highs(m, time_limit_s, threads, abs_gap_ns, progress=say, start=start)
    return solve_cpsat(m, time_limit_s, threads, abs_gap_ns)


# DTR's envelope (analysis/envelope.py defines it over a curve): a schedule that fits a budget fits
# every larger one, so DTR's runs at slightly smaller budgets are schedules for this one too (where DTR
# runs out of memory at the budget, or takes a pathological overhead there, one of them may not).
ENVELOPE_SCALES = (0.995, 0.99, 0.98, 0.97, 0.95, 0.9)


def _start(program: Program, g: ItemGraph, m: Milp, budget_bytes: int, say):
    """DTR's overhead at this budget (None if it did not end ok); the schedule of the cheapest run of
    the portfolio (portfolio_best: DTR's envelope among them) as a starting solution; and that run's
    (recompute ns, schedule), valid under this budget as it stands (None, None when none ends ok)."""
    dtr_overhead, best = portfolio_best(program, budget_bytes)
    say(f"DTR: {dtr_overhead:.4f}x" if dtr_overhead is not None else "DTR: did not end ok")
    if best is None:
        return dtr_overhead, None, None
    say(f"start: {best[2]}'s run at {best[3]} of the budget ({overhead_of(program, best[0]):.4f}x)")
    return dtr_overhead, start_of_schedule(program, g, m, best[1]), best[:2]


def solve_optimal(program: Program, budget_bytes: int, *, solver: str = DEFAULT_SOLVER,
                  time_limit_s: float = DEFAULT_TIME_LIMIT_S, threads: int = DEFAULT_THREADS,
                  gap: float = DEFAULT_GAP, lp_bound: bool = True, warm_start: bool = True,
                  progress: Callable[[str], None] | None = None) -> OptimalResult:
    """The best schedule found within `time_limit_s`, replayed under the budget, and a bound no schedule
    beats. The first solve holds memory at stage boundaries only (a relaxation: its bound holds for every
    schedule); a stage whose recomputations then cross the budget gets exact rows, and the solve repeats."""
    if solver not in SOLVERS:
        raise UsageError(f"unknown solver {solver!r} (known: {', '.join(SOLVERS)})")
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    g = item_graph(program)
    exact: set[int] = set()
    m = build_milp(g, budget_bytes)
    say(f"{program.name}: {m.n_binaries:,} binaries, {m.n_cols - m.n_binaries:,} continuous, {m.n_rows:,} rows "
        f"(built in {time.perf_counter() - t0:.1f} s)")
    lp = None
    if m.infeasible is None and lp_bound:
        lp = solve_highs(m, time_limit_s, threads, relax=True)
        say(f"LP bound {_fmt(overhead_of(program, lp.bound) if lp.status == OPTIMAL else None)} "
            f"in {lp.time_s:.1f} s ({lp.status})")
    abs_gap_ns = gap * program.compute_ns
    dtr_overhead = start = start_run = None
    if warm_start and m.infeasible is None:
        dtr_overhead, start, start_run = _start(program, g, m, budget_bytes, say)
    run = bound_run = None
    schedule = None
    rounds = 0
    fallback = None  # (recompute ns, schedule) valid under the budget: kept if no solve does better in time
    n_leading = len(m.r_cols) + len(m.s_cols)  # R and S come first in every refinement of the model
    polished = 0
    if start is not None:
        candidate, peaks = schedule_from_solution(program, g, m, start, f"optimal:{solver}", budget_bytes)
        if max(peaks) <= budget_bytes:
            start, polished = _polished(program, g, m, start, budget_bytes, deadline, say)
            candidate, peaks = schedule_from_solution(program, g, m, start, f"optimal:{solver}", budget_bytes)
            if max(peaks) > budget_bytes:  # the windows' rows are exact: a bug, said as such
                raise AssertionError("the polished schedule crosses the budget")
            fallback = (float(m.col_cost @ start), candidate)
    if start_run is not None and (fallback is None or start_run[0] < fallback[0]):
        fallback = start_run  # the run's own schedule, in its own order: valid as it is (made_by says so)
    if m.infeasible is not None or (lp is not None and lp.status == INFEASIBLE):
        run = bound_run = SolverRun(solver, INFEASIBLE, None, None, math.inf, 0.0)
    while run is None or (run.x is not None and schedule is None):
        left = deadline - time.perf_counter()
        if run is not None and left <= 0:
            break
        run = _solve(m, solver, max(left, 1.0), threads, abs_gap_ns, say,
                     None if start is None else start[:n_leading])
        rounds += 1
        bound_run = bound_run or run  # the relaxation's run: its bound holds for every schedule
        if run.x is None:
            break
        candidate, peaks = schedule_from_solution(program, g, m, run.x, f"optimal:{run.solver}", budget_bytes)
        over = over_budget(peaks, budget_bytes)
        if not over:
            schedule = candidate
            break
        if over <= exact:  # the model's memory and the schedule's disagree: a bug, said as such
            raise AssertionError(f"stages {sorted(over)} cross the budget with exact rows")
        exact |= over
        say(f"round {rounds}: {len(over)} stage(s) cross the budget while recomputing: "
            f"exact rows for {len(exact)} stage(s)")
        m = build_milp(g, budget_bytes, frozenset(exact))
    model_optimal = schedule is not None and run.status == OPTIMAL
    if fallback is not None and (schedule is None or fallback[0] < run.objective):
        schedule, model_optimal = fallback[1], False
        say("the solves found nothing better than the start's own schedule")
    lp_over = None if lp is None or lp.status != OPTIMAL else overhead_of(program, lp.bound)
    crossing_ns = crossing_bound_ns(program, budget_bytes)
    bound_ns = max(bound_run.bound, lp.bound if lp_over is not None else 0.0, crossing_ns)
    bound_over = math.inf if bound_run.status == INFEASIBLE else overhead_of(program, bound_ns)
    crossing_over = overhead_of(program, crossing_ns)
    replay = None
    overhead = gap_reached = None
    status = run.status if schedule is None else FEASIBLE
    if schedule is not None:
        replay = check_schedule(program, schedule, budget_bytes)
        overhead = replay.overhead
        gap_reached = max(0.0, (overhead - bound_over) / overhead)
        if replay.remat_ns <= bound_ns + abs_gap_ns:
            status = OPTIMAL
    elif status in (OPTIMAL, FEASIBLE):
        status = UNKNOWN  # solutions found, none of them a schedule within the budget in time
    solve_s = time.perf_counter() - t0
    say(f"{status}: best {_fmt(overhead)}, bound {_fmt(bound_over)} in {solve_s:.1f} s, {rounds} round(s)")
    return OptimalResult(program.name, budget_bytes, EXACT, solver, status, overhead, bound_over, lp_over,
                         crossing_over, gap_reached, solve_s, lp.time_s if lp is not None else None, m.n_binaries, m.n_rows,
                         dtr_overhead, model_optimal, rounds, len(exact), replay, schedule, polished)


def _polished(program: Program, g: ItemGraph, m: Milp, start: np.ndarray, budget_bytes: int, deadline: float,
              say) -> tuple[np.ndarray, int]:
    """The start polished window by window (polish.py) for POLISH_SHARE of the time left, as columns of
    `m`, and the windows that made it cheaper."""
    now = time.perf_counter()
    until = now + POLISH_SHARE * (deadline - now)

    def sweep(n: int, kind: str, solved: int, improved: int, ns: float) -> None:
        say(f"polish, sweep {n} ({kind}): {solved} window(s) solved, {improved} cheaper: "
            f"{overhead_of(program, ns):.4f}x")

    done = polish(program, g, m, budget_bytes, start, until, on_sweep=sweep)
    x = np.zeros(m.n_cols)
    x[:len(done.x)] = done.x
    return x, done.windows_improved


def lp_bound(program: Program, budget_bytes: int, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
             threads: int = DEFAULT_THREADS) -> OptimalResult:
    """The LP relaxation's bound alone (no schedule)."""
    g = item_graph(program)
    m = build_milp(g, budget_bytes)
    if m.infeasible is not None:
        return OptimalResult(program.name, budget_bytes, LP_ONLY, "highs", INFEASIBLE, None, math.inf, math.inf,
                             None, None, 0.0, 0.0, m.n_binaries, m.n_rows, None, False, 0, 0, None, None)
    lp = solve_highs(m, time_limit_s, threads, relax=True)
    over = (math.inf if lp.status == INFEASIBLE else overhead_of(program, lp.bound) if lp.status == OPTIMAL
            else overhead_of(program, 0.0))
    return OptimalResult(program.name, budget_bytes, LP_ONLY, "highs", lp.status, None, over,
                         over if lp.status == OPTIMAL else None, None, None, lp.time_s, lp.time_s, m.n_binaries,
                         m.n_rows, None, False, 1, 0, None, None)


def portfolio_best(program: Program, budget_bytes: int, say=lambda _msg: None,
                   policies: tuple[str, ...] = PORTFOLIO) -> tuple[float | None, tuple | None]:
    """DTR's overhead at this budget (None: it did not end ok), and (recompute ns, schedule, maker,
    scale) of the cheapest schedule that ends ok: the runs of `policies` at the budget and at
    ENVELOPE_SCALES of it, and the chain schedule (chain.py), or None. Each run is stopped once it costs
    more than the best so far (it could not be chosen), and at the report's overhead cap before there is
    one (a thrash can run for minutes on a long trace)."""
    from ..schedule.emit import simulate_schedule

    dtr_overhead = best = None
    for policy in policies:
        for scale in (1.0, *ENVELOPE_SCALES):
            limit = REPORT_OVERHEAD_LIMIT if best is None else max(1.0, overhead_of(program, best[0]))
            result, schedule = simulate_schedule(program, int(budget_bytes * scale), policy, overhead_limit=limit)
            if policy == "dtr" and scale == 1.0:
                dtr_overhead = result.overhead if result.outcome == "ok" else None
            if result.outcome == "ok" and (best is None or result.remat_ns < best[0]):
                best = (result.remat_ns, schedule, policy, scale)
                say(f"best so far: {policy} at {scale} of the budget ({overhead_of(program, best[0]):.4f}x)")
    limit_ns = (REPORT_OVERHEAD_LIMIT - 1) * program.compute_ns if best is None else best[0] - 1
    chained = best_chain_schedule(program, budget_bytes, remat_limit_ns=limit_ns)
    if chained is not None:
        best = (chained.remat_ns, chained.schedule, CHAIN_MAKER, 1.0)
        say(f"best so far: the chain schedule, {chained.plan} ({overhead_of(program, best[0]):.4f}x)")
    return dtr_overhead, best


def crossing_bound(program: Program, budget_bytes: int, say=lambda _msg: None) -> OptimalResult:
    """Without the model (traces too large for it): bound.py's crossing bound, and the best schedule of
    the PORTFOLIO of heuristics (portfolio_best) replayed by the schedule checker, DTR's run among them."""
    t0 = time.perf_counter()
    ns = crossing_bound_ns(program, budget_bytes)
    over = overhead_of(program, ns)
    dtr_overhead = best = None
    if ns != math.inf:
        dtr_overhead, best = portfolio_best(program, budget_bytes, say)
    replay = overhead = gap = schedule = None
    status = INFEASIBLE if ns == math.inf else UNKNOWN
    solver = "none"
    if best is not None:
        schedule = best[1]
        replay = check_schedule(program, schedule, budget_bytes)
        overhead = replay.overhead
        gap = max(0.0, (overhead - over) / overhead)
        status = OPTIMAL if replay.remat_ns <= ns + DEFAULT_GAP * program.compute_ns else FEASIBLE
        solver = f"portfolio:{best[2]}"
    return OptimalResult(program.name, budget_bytes, CROSSING_ONLY, solver, status, overhead, over, None, over, gap,
                         time.perf_counter() - t0, None, 0, 0, dtr_overhead, False, 0, 0, replay, schedule)


def solve(program: Program, budget_bytes: int, settings: SolveSettings, *, threads: int = DEFAULT_THREADS,
          progress: Callable[[str], None] | None = None) -> OptimalResult:
    """What `settings` ask for at one budget: without the model (bound_only: the crossing bound and the
    portfolio's best schedule), or the whole solve. `dtrlab optimal` and a sweep's optimal rows both
    come from here."""
    if settings.bound_only:
        return crossing_bound(program, budget_bytes, progress or (lambda _msg: None))
    return solve_optimal(program, budget_bytes, solver=settings.solver, time_limit_s=settings.time_limit_s,
                         threads=threads, gap=settings.gap, progress=progress)


def min_budget_bytes(program: Program) -> int:
    """No schedule fits below this: an operator needs its inputs' storages, its outputs' bytes and the
    constants made so far resident at once, and the end needs every pinned output and constant."""
    g = item_graph(program)
    need = 0
    size = g.item_bytes.tolist()
    for k, o in enumerate(g.stage_op.tolist()):
        ins = sum(size[i] for i in g.op_ins[o] if i not in g.op_outs[o])
        need = max(need, int(g.const_bytes[k]) + ins + int(g.op_out_bytes[o]))
    pinned = int(g.item_bytes[g.pinned].sum())
    return max(need, int(g.const_bytes[-1]) + pinned)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else "inf" if x == math.inf else f"{x:.4f}x"


__all__ = ["OptimalResult", "solve", "solve_optimal", "lp_bound", "crossing_bound", "min_budget_bytes", "schedule_from_solution",
           "overhead_of", "EXACT", "LP_ONLY", "CROSSING_ONLY", "OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]
