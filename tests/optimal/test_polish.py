"""Polishing a schedule window by window (optimal/polish.py) against brute force and the checker: every
polished schedule replays within its budget, is never dearer than its start and never cheaper than the
least any schedule needs; one window over the whole program reaches that least; and on ResNet-32 at a
tenth of its peak it makes DTR's schedule cheaper."""

from __future__ import annotations

import time

import numpy as np
import pytest

from brute import brute_force_optimum, rnn_program, small_program
from conftest import needs_shared, public_program
from dtrlab.optimal.graph import item_graph
from dtrlab.optimal.model import build_milp
from dtrlab.optimal.polish import polish
from dtrlab.optimal.solve import min_budget_bytes, portfolio_best, schedule_from_solution
from dtrlab.optimal.warm import start_of_schedule
from dtrlab.schedule.check import check_schedule
from dtrlab.sim.simulate import budget_from_ratio


def _start(program, budget):
    """The portfolio's best run read in stages, and the model it is read in; None where it does not fit as
    the model's exact rows count it (polish needs a start that does)."""
    g = item_graph(program)
    m = build_milp(g, budget)
    _, best = portfolio_best(program, budget)
    if best is None:
        return None
    x = start_of_schedule(program, g, m, best[1])
    _, peaks = schedule_from_solution(program, g, m, x, "start", budget)
    return (g, m, x) if max(peaks) <= budget else None


def _replayed(program, g, m, x_lead, budget):
    x = np.zeros(m.n_cols)
    x[:len(x_lead)] = x_lead
    schedule, _ = schedule_from_solution(program, g, m, x, "polished", budget)
    return check_schedule(program, schedule, budget)


def _budgets(program):
    low, high = min_budget_bytes(program), budget_from_ratio(program, 1.0)
    return (low + (high - low) // 4, (low + high) // 2)


def test_polished_schedules_fit_and_lie_between_the_optimum_and_their_start():
    """Windows of 2 and 3 stages on small recurrences (every stage in several windows)."""
    polished = 0
    for seed in range(8):
        program = rnn_program(seed, cells=3)
        for budget in _budgets(program):
            got = _start(program, budget)
            if got is None:
                continue
            g, m, x = got
            start_ns = float(m.col_cost @ x)
            optimum = brute_force_optimum(program, budget)
            for width in (2, 3):
                done = polish(program, g, m, budget, x, time.perf_counter() + 60, window_stages=width)
                replay = _replayed(program, g, m, done.x, budget)
                assert replay.peak_bytes <= budget
                assert replay.remat_ns == done.objective_ns <= start_ns
                assert done.objective_ns >= optimum, (seed, budget, width)
                polished += done.windows_improved > 0
    assert polished >= 4  # the starts are not all optimal already


def test_one_window_over_the_whole_program_is_the_brute_force_optimum():
    """On small recurrences (three seeds whose solves take seconds: a whole recurrence is one exact model)
    and small random programs; at least five of the starts are dearer than the optimum."""
    programs = [rnn_program(seed, cells=3) for seed in (0, 2, 5)] + [small_program(seed, 5) for seed in range(12)]
    improved = 0
    for program in programs:
        for budget in _budgets(program):
            got = _start(program, budget)
            if got is None:
                continue
            g, m, x = got
            optimum = brute_force_optimum(program, budget)
            done = polish(program, g, m, budget, x, time.perf_counter() + 60, window_stages=g.n_stages + 2)
            assert done.objective_ns == optimum, (program.name, budget)
            assert _replayed(program, g, m, done.x, budget).peak_bytes <= budget
            improved += float(m.col_cost @ x) > optimum
    assert improved >= 5


def test_a_window_needs_two_stages():
    program = small_program(0, 5)
    g = item_graph(program)
    budget = min_budget_bytes(program)
    with pytest.raises(ValueError, match="at least 2 stages"):
        polish(program, g, build_milp(g, budget), budget, np.zeros(0), time.perf_counter() + 1, window_stages=1)


@pytest.mark.slow
@needs_shared
def test_resnet32_at_a_tenth_polished_is_cheaper_than_its_start():
    """DTR's own run is the portfolio's best at 0.1 (2.1881x, docs/optimal.md); twenty seconds of windows
    make it cheaper, and the checker replays the result within the budget."""
    program = public_program("resnet32")
    budget = budget_from_ratio(program, "0.1")
    g, m, x = _start(program, budget)
    done = polish(program, g, m, budget, x, time.perf_counter() + 20)
    assert done.windows_improved > 0 and done.objective_ns < float(m.col_cost @ x)
    replay = _replayed(program, g, m, done.x, budget)
    assert replay.peak_bytes <= budget and replay.remat_ns == done.objective_ns
