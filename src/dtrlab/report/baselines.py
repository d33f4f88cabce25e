"""The report's optimal baselines: per trace, DTR's curve, its envelope, the best schedule the solver found
and the lower bound, from whatever solver rows (policy optimal) the store holds; the study's two windows.

Owns which solves `reproduce --optimal` asks for and the section's values; plots.py draws, templates lay out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from ..analysis.envelope import envelope, envelope_at
from ..analysis.runs import runs_of
from ..formats import overhead_text
from ..optimal.defaults import OPTIMAL_POLICY, SolveSettings
from ..sim.result import OK
from ..sweep.grid import build_specs, parse_ratios, ratio_literal
from ..trace.lower import Program
from .plan import RUNTIME, SUBJECT_POLICY, Plan
from .study import FETCH_AND_REPRODUCE, PATHOLOGY_WINDOWS

# What a user runs to get the solver's rows into a report folder's store (S: seconds a budget).
HOW_TO_SOLVE = ("dtrlab reproduce --optimal --time-limit S",
                "dtrlab sweep SOURCE --policy optimal --ratios SPEC --store REPORT/dtrlab-results.duckdb")


@dataclass(frozen=True)
class Point:
    """One budget of a trace: DTR's run, its envelope, and the solver's rows' best and bound.

    A schedule that fits a budget fits every larger one, so a bound that holds at a budget holds at
    every smaller one:
    best: the least replayed overhead among the solver's rows at this budget and every smaller one
    (None: no schedule); bound: the largest lower bound among the rows at this budget and every larger
    one (inf: no schedule fits; None: no solver row); status: of this budget's row that gave its own
    best (else of the one that gave its own bound)."""

    ratio: float | None
    budget_bytes: int
    dtr_outcome: str | None
    dtr: float | None
    envelope: float | None
    best: float | None
    bound: float | None
    gap: float | None
    status: str | None
    solves: int  # solver rows at this budget


@dataclass(frozen=True)
class TraceBaselines:
    trace: str
    points: tuple[Point, ...]  # every budget DTR or the solver ran, by budget

    @property
    def solved(self) -> tuple[Point, ...]:
        return tuple(p for p in self.points if p.solves)


@dataclass(frozen=True)
class Window:
    """One of the study's pathology windows, on the trace that has it: the points inside it."""

    trace: str
    pathology: str
    lo: float
    hi: float
    points: tuple[Point, ...]

    @property
    def reading(self) -> str:
        """What the window's rows say, in one sentence (the figures only, no verdict)."""
        said = []
        rescued = [p for p in self.points if p.dtr_outcome not in (None, OK) and p.envelope is not None]
        if rescued:
            said.append(f"DTR fails at {len(rescued)} budget(s) where its own schedule at a smaller budget fits "
                        f"(its envelope there: {overhead_text(min(p.envelope for p in rescued), 4)}x at best)")
        worst = max((p for p in self.points if p.dtr is not None and p.envelope), default=None,
                    key=lambda p: p.dtr / p.envelope)
        if worst is not None and worst.dtr > worst.envelope:
            said.append(f"DTR's run is up to {worst.dtr / worst.envelope:.2f}x its envelope (at {worst.ratio:g})")
        best = [p.best for p in self.points if p.best is not None]
        if best:
            said.append(f"the best schedule found is {overhead_text(min(best), 4)}x-{overhead_text(max(best), 4)}x")
        bounds = [p.bound for p in self.points if p.bound is not None and math.isfinite(p.bound)]
        if bounds:
            said.append(f"no schedule beats {overhead_text(min(bounds), 4)}x-{overhead_text(max(bounds), 4)}x "
                        "(the bounds)")
        return "; ".join(said) + "." if said else ""


@dataclass(frozen=True)
class Baselines:
    traces: tuple[TraceBaselines, ...]  # the traces with solver rows, in the report's order
    unsolved: tuple[str, ...]  # the traces without
    windows: tuple[Window, ...]  # the study's windows on traces here (with or without solver rows)
    how_to: tuple[str, str] = HOW_TO_SOLVE
    fetch: str = FETCH_AND_REPRODUCE


def optimal_ratios(plan: Plan, program: Program) -> tuple[float, ...]:
    """The budgets `reproduce --optimal` solves on a trace: the coarse grid and its pathology window."""
    window = PATHOLOGY_WINDOWS.get(program.sha256)
    return tuple(sorted(set(plan.coarse()) | set(parse_ratios(window[0]) if window else ())))


def dtr_specs(path: str, programs: list[Program], plan: Plan, **limit) -> list:
    """DTR's runs at the budgets `reproduce --optimal` solves (with the plan's overhead cap and seed,
    `limit`), so that every solved budget has DTR's run beside it; most are in the store already."""
    specs = []
    for program in programs:
        ratios = optimal_ratios(plan, program)
        if ratios:
            specs += build_specs(path, [program], [SUBJECT_POLICY], [RUNTIME], ratios, **limit)
    return specs


def optimal_specs(path: str, programs: list[Program], plan: Plan, settings: SolveSettings) -> list:
    """One solve a budget of optimal_ratios; a trace past plan.optimal_max_operators gets the crossing
    bound alone (its exact model would not fit: the LSTM's has tens of millions of variables)."""
    specs = []
    for program in programs:
        ratios = optimal_ratios(plan, program)
        if not ratios:
            continue
        exact = plan.optimal_max_operators is None or program.n_ops <= plan.optimal_max_operators
        chosen = settings if exact else replace(settings, bound_only=True)
        specs += build_specs(path, [program], [OPTIMAL_POLICY], [], ratios, solve=chosen)
    return specs


def _solved_at(rows: pd.DataFrame) -> tuple[float | None, float | None, str | None]:
    """(best, bound, status) over a budget's solver rows (any settings: every bound holds)."""
    ok = rows[rows["outcome"] == OK]
    bounds = [b for b in rows["bound_overhead"] if b is not None and not pd.isna(b)]
    bound = max(bounds) if bounds else None
    if len(ok):
        top = ok.sort_values(["overhead", "key"]).iloc[0]
        best, status = float(top["overhead"]), top["solver_status"]
    else:
        best = None
        top = rows.sort_values(["bound_overhead", "key"], ascending=[False, True]).iloc[0] if bounds else rows.iloc[0]
        status = top["solver_status"]
    return best, bound, None if pd.isna(status) else str(status)


def trace_baselines(trace: str, dtr_runs, solver_rows: pd.DataFrame) -> TraceBaselines:
    """The points of one trace: DTR's runs (analysis.runs.Run, any order) and the trace's solver rows."""
    env = envelope(dtr_runs)
    dtr = {r.budget_bytes: r for r in dtr_runs}
    by_budget = {int(b): g for b, g in solver_rows.groupby("budget_bytes")} if len(solver_rows) else {}
    points = []
    for budget in sorted(set(dtr) | set(by_budget)):
        run = dtr.get(budget)
        rows = by_budget.get(budget)
        best = bound = status = None
        ratio = run.ratio if run is not None else None
        if rows is not None:
            best, bound, status = _solved_at(rows)
            if ratio is None:
                known = rows["ratio"].dropna()
                ratio = float(known.iloc[0]) if len(known) else None
        points.append(Point(ratio, budget, run.outcome if run else None, run.overhead if run else None,
                            envelope_at(env, budget), best, bound, None, status, 0 if rows is None else len(rows)))
    return TraceBaselines(trace, _carried(points))


def _carried(points: list[Point]) -> tuple[Point, ...]:
    """`points` (by budget, each with its own rows' best and bound) with each best carried up to every
    larger budget and each bound down to every smaller one (Point), and the gap of what each ends with."""
    out = list(points)
    least = None
    for i, p in enumerate(out):
        least = p.best if least is None else least if p.best is None else min(least, p.best)
        out[i] = replace(p, best=least if p.solves else p.best)
    most = None
    for i in reversed(range(len(out))):
        p = out[i]
        most = p.bound if most is None else most if p.bound is None else max(most, p.bound)
        bound = most if p.solves else p.bound
        gap = None if p.best is None or bound is None or math.isinf(bound) else max(0.0, (p.best - bound) / p.best)
        out[i] = replace(p, bound=bound, gap=gap)
    return tuple(out)


def _dtr_rows(stored: pd.DataFrame, overhead_limit: float | None, seed: int) -> pd.DataFrame:
    """The store's runs of DTR as the report runs it: its runtime, overhead cap and seed."""
    same_limit = stored["overhead_limit"].isna() if overhead_limit is None else stored["overhead_limit"] == overhead_limit
    return stored[(stored["policy"] == SUBJECT_POLICY) & (stored["runtime"] == RUNTIME) & same_limit
                  & (stored["seed"] == seed)]


def baselines(traces: tuple[dict, ...], stored: pd.DataFrame, overhead_limit: float | None, seed: int) -> Baselines:
    """The section from the report's traces (name, sha256) and the store's rows: DTR's (as the report runs
    it: `overhead_limit`, `seed`; any budgets the store has) and the solver's (any settings)."""
    solver = stored[stored["policy"] == OPTIMAL_POLICY]
    dtr = _dtr_rows(stored, overhead_limit, seed)
    per, unsolved, windows = [], [], []
    for info in traces:
        rows = solver[solver["trace_sha256"] == info["sha256"]]
        runs = runs_of(dtr[dtr["trace_sha256"] == info["sha256"]])
        tb = trace_baselines(info["name"], runs, rows)
        if len(rows):
            per.append(tb)
        else:
            unsolved.append(info["name"])
        window = PATHOLOGY_WINDOWS.get(info["sha256"])
        if window is not None:
            lo, hi = min(parse_ratios(window[0])), max(parse_ratios(window[0]))
            inside = tuple(p for p in tb.points if p.ratio is not None
                           and ratio_literal(lo) <= ratio_literal(p.ratio) <= ratio_literal(hi))
            windows.append(Window(info["name"], window[1], lo, hi, inside))
    return Baselines(tuple(per), tuple(unsolved), tuple(windows))
