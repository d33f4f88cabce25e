"""Polishing a schedule window by window: a few consecutive stages re-solved, the rest held.

A schedule read as a solution of the stage model (model.py: each stage's recomputations once, in
program order) is improved a window at a time. The window's stages get exact rows (memory at every
computation) and free R and S columns; every other R and S column is held at the schedule's value (the
stage before the window gets exact rows too, as what the window keeps into its first stage changes what
that stage holds); HiGHS then looks for a cheaper solution of what is left, a small problem. Its answer
fits the budget at every event of the window, and the rest is the schedule's own, so each accepted step
is again a schedule within the budget, and cheaper. Windows overlap by half their width and are taken
in program order, in sweeps; a window is solved again only once a change near it could let it do
better, and a window whose solve runs out of time with nothing found gives way to its two halves and one
across them.

Sweeps of a second kind, **lazy** ones, come first: a lazy window gets only the
first model's rows (memory at each stage's own operator), plus exact rows at the stages that some lazy
window's answer, read as a schedule, has crossed the budget at so far. An answer that crosses adds its
stages and the window is solved again; one that fits is taken. A lazy window is a looser model, quicker
to solve, exact only where it must be. Each kind sweeps until a sweep neither changes nor splits
anything, then the other kind takes over from what it left; polishing ends when a kind's turn after the
first improves nothing, or the time is up. Widths and times: defaults.py.

A large-neighbourhood search: what it gives is a schedule (an upper bound), never a bound.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .defaults import EXACT, LAZY, POLISH_KINDS, WINDOW_STAGES, WINDOW_TIME_S
from .graph import ItemGraph
from ..trace.lower import Program
from .model import Milp, build_milp
from .read import schedule_from_solution
from .solvers import UNKNOWN, solve_highs


@dataclass(frozen=True)
class Polished:
    """The R and S columns of the best schedule found, its recompute ns, and the windows that made it
    cheaper."""

    x: np.ndarray
    objective_ns: float
    windows_improved: int


def column_stages(m: Milp) -> np.ndarray:
    """The stage of each leading (R and S) column: R and S come first, in the same order, in every model
    build_milp makes of one graph and budget."""
    stages = np.empty(len(m.r_cols) + len(m.s_cols), np.int64)
    for (k, _o), c in m.r_cols.items():
        stages[c] = k
    for (k, _s), c in m.s_cols.items():
        stages[c] = k
    return stages


def polish(program: Program, g: ItemGraph, m: Milp, budget_bytes: int, x: np.ndarray, deadline: float, *,
           window_stages: int = WINDOW_STAGES, window_time_s: float = WINDOW_TIME_S,
           on_sweep: Callable[[int, str, int, int, float], None] | None = None) -> Polished:
    """Polish the schedule of `program` whose R and S columns of `m` (build_milp's model of `g` under
    `budget_bytes`) are `x` (it must fit the budget as model.py's exact rows count it) until `deadline`
    (time.perf_counter()); `on_sweep(sweep, kind, solved, improved, objective_ns)` after each sweep, `kind`
    EXACT or LAZY."""
    if window_stages < 2:
        raise ValueError(f"a window needs at least 2 stages, got {window_stages}")
    stages = column_stages(m)
    n = len(stages)
    cost = m.col_cost[:n].astype(float)
    x = np.asarray(x[:n], float).round()
    T = g.n_stages
    crossed: set[int] = set()  # stages a lazy window's solution crossed the budget at: exact rows from then on
    models: dict[frozenset[int], Milp] = {}

    def model(exact: frozenset[int]) -> Milp:
        if exact not in models:
            models.clear()  # one model kept: the lazy set only grows, and a window's set differs
            models[exact] = build_milp(g, budget_bytes, exact)
        return models[exact]

    def solve_in(wm: Milp, a: int, stop: int, x: np.ndarray, left: float):
        held = (stages < a) | (stages >= stop)
        lb, ub = wm.col_lb.copy(), wm.col_ub.copy()
        lb[:n][held] = x[held]
        ub[:n][held] = x[held]
        run = solve_highs(dataclasses.replace(wm, col_lb=lb, col_ub=ub), min(window_time_s, left), start=x)
        better = run.x is not None and float(cost @ run.x[:n].round()) < float(cost @ x) - 0.5
        return (run.x[:n].round() if better else None), run.status

    def exact_window(a: int, stop: int, x: np.ndarray, left: float):
        return solve_in(model(frozenset(range(max(a - 1, 0), stop))), a, stop, x, left)

    def lazy_window(a: int, stop: int, x: np.ndarray, left: float):
        until = time.perf_counter() + left
        while True:
            found, status = solve_in(model(frozenset(crossed)), a, stop, x, until - time.perf_counter())
            if found is None:
                return None, status
            over = _stages_over(program, g, m, found, budget_bytes)
            if not over:
                return found, status
            crossed.update(over)
            if until - time.perf_counter() < 1.0:
                return None, UNKNOWN

    # Phases of sweeps, in POLISH_KINDS' order: a phase sweeps its kind's windows until a sweep neither
    # changes nor splits anything; then the next kind's phase starts from what it left. A phase after the
    # first that improves nothing ends the polishing (the other kind has nothing new to start from).
    sweep = solved = improved = 0
    window_of = {LAZY: lazy_window, EXACT: exact_window}
    for phase, kind in enumerate(itertools.cycle(POLISH_KINDS)):
        if time.perf_counter() >= deadline - 1.0:
            break
        before = improved
        x, sweep, solved, improved = _sweeps(kind, window_of[kind], x, cost, T, window_stages, deadline, sweep,
                                             solved, improved, on_sweep)
        if phase > 0 and improved == before:
            break
    return Polished(x, float(cost @ x), improved)


def _sweeps(kind: str, solve_window, x, cost, T: int, window_stages: int, deadline: float, sweep: int, solved: int,
            improved: int, on_sweep):
    """One phase: sweeps of windows solved by `solve_window(a, stop, x, left) -> (cheaper x or None,
    status)` until one neither changes nor splits anything, or the deadline; the counts carried through."""
    windows = [(a, min(window_stages, T + 1 - a)) for a in range(0, T + 1, window_stages // 2)]
    changed_at = np.full(T + 1, -1)  # the count of windows solved when a stage last changed
    solved_at: dict[tuple[int, int], int] = {}
    while time.perf_counter() < deadline - 1.0:
        sweep += 1
        solved_before, improved_before = solved, improved
        split = {}  # windows whose solve ran out of time with nothing: halves (and one across them) go next
        for a, width in windows:
            left = deadline - time.perf_counter()
            if left < 1.0:
                break
            near = changed_at[max(0, a - width):a + 2 * width]
            if (a, width) in solved_at and near.max() < solved_at[a, width]:
                continue  # nothing near it changed since it was solved
            found, status = solve_window(a, a + width, x, left)
            solved += 1
            solved_at[a, width] = solved
            if found is not None:
                x = found
                improved += 1
                changed_at[a:a + width] = solved
            elif status == UNKNOWN and width >= 4:
                half = width // 2
                split[a, width] = [(a, half), (a + half // 2, half), (a + half, width - half)]
        if on_sweep is not None:
            on_sweep(sweep, kind, solved - solved_before, improved - improved_before, float(cost @ x))
        if improved == improved_before and not split:
            break
        windows = [w for window in windows for w in split.get(window, [window])]
    return x, sweep, solved, improved


def _stages_over(program: Program, g: ItemGraph, m: Milp, x_lead: np.ndarray, budget_bytes: int) -> set[int]:
    """The stages at which the schedule that the R and S columns `x_lead` of `m` mean crosses the budget."""
    x = np.zeros(m.n_cols)
    x[:len(x_lead)] = x_lead
    _, peaks = schedule_from_solution(program, g, m, x, "polish", budget_bytes)
    return {k for k, peak in enumerate(peaks) if peak > budget_bytes}


__all__ = ["polish", "Polished", "column_stages"]
