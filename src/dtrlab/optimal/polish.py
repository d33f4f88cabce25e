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
import functools
import itertools
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..trace.lower import Program
from .defaults import EXACT, LAZY, POLISH_KINDS, WINDOW_STAGES, WINDOW_TIME_S
from .graph import ItemGraph
from .model import Milp, build_milp
from .read import over_budget, schedule_from_solution
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
    x = np.asarray(x[:len(stages)], float).round()
    crossed: set[int] = set()  # stages a lazy window's solution crossed the budget at: exact rows from then on
    # One model kept: the lazy set only grows, and each exact window's set differs.
    model = functools.lru_cache(maxsize=1)(lambda exact: build_milp(g, budget_bytes, exact))

    def exact_window(a: int, stop: int, x: np.ndarray, left: float):
        wm = model(frozenset(range(max(a - 1, 0), stop)))
        return improve_window(wm, stages, x, a, stop, min(window_time_s, left))

    def lazy_window(a: int, stop: int, x: np.ndarray, left: float):
        until = time.perf_counter() + left
        while True:
            wm = model(frozenset(crossed))
            found, status = improve_window(wm, stages, x, a, stop, min(window_time_s, until - time.perf_counter()))
            if found is None:
                return None, status
            over = over_budget(schedule_from_solution(program, g, m, found, "polish", budget_bytes)[1], budget_bytes)
            if not over:
                return found, status
            crossed.update(over)
            if until - time.perf_counter() < 1.0:
                return None, UNKNOWN

    # Phases of sweeps, in POLISH_KINDS' order: a phase sweeps its kind's windows until a sweep neither
    # changes nor splits anything; then the next kind's phase starts from what it left. A phase after the
    # first that improves nothing ends the polishing (the other kind has nothing new to start from).
    cost = m.col_cost[:len(stages)].astype(float)
    window_of = {LAZY: lazy_window, EXACT: exact_window}
    sweeps = improved = 0
    for phase, kind in enumerate(itertools.cycle(POLISH_KINDS)):
        if time.perf_counter() >= deadline - 1.0:
            break
        x, phase_sweeps, phase_improved = _phase(kind, window_of[kind], x, cost, g.n_stages, window_stages,
                                                 deadline, sweeps, on_sweep)
        sweeps += phase_sweeps
        improved += phase_improved
        if phase > 0 and not phase_improved:
            break
    return Polished(x, float(cost @ x), improved)


def improve_window(m: Milp, stages: np.ndarray, x: np.ndarray, a: int, stop: int, time_s: float):
    """A cheaper solution of `m` with every R and S column outside stages a..stop-1 held at `x` (their
    values; `stages` is column_stages(m)), found by HiGHS in at most `time_s`: (its R and S columns, or
    None when it found none cheaper; HiGHS's status)."""
    n = len(stages)
    held = (stages < a) | (stages >= stop)
    lb, ub = m.col_lb.copy(), m.col_ub.copy()
    lb[:n][held] = x[held]
    ub[:n][held] = x[held]
    run = solve_highs(dataclasses.replace(m, col_lb=lb, col_ub=ub), time_s, start=x)
    if run.x is None or float(m.col_cost[:n] @ run.x[:n].round()) >= float(m.col_cost[:n] @ x) - 0.5:
        return None, run.status
    return run.x[:n].round(), run.status


def _phase(kind: str, solve_window, x, cost, T: int, window_stages: int, deadline: float, sweeps_before: int,
           on_sweep):
    """One phase: sweeps of windows solved by `solve_window(a, stop, x, left) -> (cheaper x or None,
    status)` until one neither changes nor splits anything, or the deadline. Returns x, the sweeps made
    and the windows that made x cheaper."""
    windows = [(a, min(window_stages, T + 1 - a)) for a in range(0, T + 1, window_stages // 2)]
    changed_at = np.full(T + 1, -1)  # the count of windows solved when a stage last changed
    solved_at: dict[tuple[int, int], int] = {}
    sweep = solved = improved = 0
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
            on_sweep(sweeps_before + sweep, kind, solved - solved_before, improved - improved_before,
                     float(cost @ x))
        if improved == improved_before and not split:
            break
        windows = [w for window in windows for w in split.get(window, [window])]
    return x, sweep, improved


__all__ = ["polish", "Polished", "column_stages", "improve_window"]
