"""The exact rows (model.py) say exactly what the schedule read off a solution peaks at (read.py, the
reading by which solve.py and polish.py accept a solution): with the R and S columns held, every stage's
exact rows can be met if and only if the reading fits the budget at every stage. Too strict, and the
polishing and the refinements miss schedules that fit; too loose, and they return schedules that do not.

The points are DTR's own runs on generated programs read in stages, each under its own budget and under
smaller ones, so that stages both fit and cross."""

from __future__ import annotations

import dataclasses

import numpy as np

from brute import rnn_program, small_program
from dtrlab.optimal.graph import item_graph
from dtrlab.optimal.model import build_milp
from dtrlab.optimal.read import schedule_from_solution
from dtrlab.optimal.solvers import INFEASIBLE, OPTIMAL, solve_highs
from dtrlab.optimal.warm import start_of_schedule
from dtrlab.schedule.emit import simulate_schedule
from dtrlab.sim.simulate import baseline


def _exact_rows_hold(g, budget, x_lead) -> bool:
    """Whether every stage's exact rows can be met with the R and S columns held at `x_lead`."""
    m = build_milp(g, budget, frozenset(range(g.n_stages + 1)))
    n = len(x_lead)
    lb, ub = m.col_lb.copy(), m.col_ub.copy()
    lb[:n] = x_lead
    ub[:n] = x_lead
    run = solve_highs(dataclasses.replace(m, col_lb=lb, col_ub=ub), 30)
    assert run.status in (OPTIMAL, INFEASIBLE), run.status
    return run.status == OPTIMAL


def test_exact_rows_hold_exactly_where_the_reading_fits():
    fits = crosses = 0
    programs = [small_program(seed, 10) for seed in range(6)] + [rnn_program(seed, cells=3) for seed in range(4)]
    for program in programs:
        g = item_graph(program)
        peak = baseline(program).peak_bytes
        for share in (0.6, 0.8):
            result, schedule = simulate_schedule(program, int(peak * share), "dtr")
            if result.outcome != "ok":
                continue
            for scale in (1.0, 0.9, 0.8):
                budget = int(peak * share * scale)
                m = build_milp(g, budget)
                if m.infeasible is not None:
                    continue
                x = start_of_schedule(program, g, m, schedule)
                _, peaks = schedule_from_solution(program, g, m, x, "dtr", budget)
                held = _exact_rows_hold(g, budget, x[:len(m.r_cols) + len(m.s_cols)])
                assert held == (max(peaks) <= budget), (program.name, budget, peaks)
                fits += held
                crosses += not held
    assert fits >= 10 and crosses >= 10  # both directions are exercised
