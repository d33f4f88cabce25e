"""Polishing a schedule window by window: a few consecutive stages re-solved exactly, the rest held.

A schedule read as a solution of the stage model (model.py: each stage's recomputations once, in
program order) is improved a window at a time. The window's stages get exact rows (memory at every
computation) and free R and S columns; every other R and S column is held at the schedule's value (the
stage before the window gets exact rows too, as what the window keeps into its first stage changes what
that stage holds); HiGHS then looks for a cheaper solution of what is left, a small problem. Its answer
fits the budget at every event of the window, and the rest is the schedule's own, so each accepted step
is again a schedule within the budget, and cheaper. Windows overlap by half their width and are taken
in program order, in sweeps; a window is solved again only once a change near it could let it do
better, a window whose solve runs out of time with nothing found gives way to its two halves and one
across them, and the sweeps end when one neither changes nor splits anything, or the time is up.
Widths and times: defaults.py.

A large-neighbourhood search: what it gives is a schedule (an upper bound), never a bound.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .defaults import WINDOW_STAGES, WINDOW_TIME_S
from .graph import ItemGraph
from .model import Milp, build_milp
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


def polish(g: ItemGraph, m: Milp, budget_bytes: int, x: np.ndarray, deadline: float, *,
           window_stages: int = WINDOW_STAGES, window_time_s: float = WINDOW_TIME_S,
           on_sweep: Callable[[int, int, int, float], None] | None = None) -> Polished:
    """Polish the schedule whose R and S columns of `m` (build_milp's model of `g` under `budget_bytes`)
    are `x` (it must fit the budget as model.py's exact rows count it) until `deadline`
    (time.perf_counter()); `on_sweep(sweep, solved, improved, objective_ns)` after each sweep."""
    if window_stages < 2:
        raise ValueError(f"a window needs at least 2 stages, got {window_stages}")
    stages = column_stages(m)
    cost = m.col_cost[:len(stages)].astype(float)
    x = np.asarray(x[:len(stages)], float).round()
    objective = float(cost @ x)
    T = g.n_stages
    windows = [(a, min(window_stages, T + 1 - a)) for a in range(0, T + 1, window_stages // 2)]
    changed_at = np.full(T + 1, -1)  # the count of windows solved when a stage last changed
    solved_at: dict[tuple[int, int], int] = {}
    solved = improved = 0
    sweep = 0
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
            stop = a + width
            wm = build_milp(g, budget_bytes, frozenset(range(max(a - 1, 0), stop)))
            held = (stages < a) | (stages >= stop)
            lb, ub = wm.col_lb.copy(), wm.col_ub.copy()
            lb[:len(stages)][held] = x[held]
            ub[:len(stages)][held] = x[held]
            run = solve_highs(dataclasses.replace(wm, col_lb=lb, col_ub=ub), min(window_time_s, left), start=x)
            solved += 1
            solved_at[a, width] = solved
            if run.x is not None and float(cost @ run.x[:len(stages)].round()) < objective - 0.5:
                x = run.x[:len(stages)].round()
                objective = float(cost @ x)
                improved += 1
                changed_at[a:stop] = solved
            elif run.status == UNKNOWN and width >= 4:
                half = width // 2
                split[a, width] = [(a, half), (a + half // 2, half), (a + half, width - half)]
        if on_sweep is not None:
            on_sweep(sweep, solved - solved_before, improved - improved_before, objective)
        if improved == improved_before and not split:
            break
        windows = [w for window in windows for w in split.get(window, [window])]
    return Polished(x, objective, improved)


__all__ = ["polish", "Polished", "column_stages"]
