"""The optimal solver against brute force: on small generated programs, the best schedule's recompute
equals the least that any schedule needs (Dijkstra over every schedule), the bound never exceeds it,
and every returned schedule replays within its budget under the schedule checker."""

from __future__ import annotations

import math

import pytest

from brute import brute_force_optimum, small_program
from conftest import needs_shared, public_program
from dtrlab.optimal.bound import crossing_bound_ns
from dtrlab.optimal.solve import FEASIBLE, INFEASIBLE, OPTIMAL, min_budget_bytes, solve_optimal
from dtrlab.schedule.check import check_schedule
from dtrlab.sim.simulate import baseline, budget_from_ratio

SEEDS = range(24)
FRACTIONS = (0.0, 0.3, 0.6)  # of the way from the least budget an operator needs to the unconstrained peak


def _budgets(program):
    # the simulator's baseline peak (the ratios' base) can sit below what any schedule needs
    low = min_budget_bytes(program)
    peak = max(baseline(program).peak_bytes, low)
    return sorted({int(low + f * (peak - low)) for f in FRACTIONS})


def _bound_ns(program, result) -> float:
    return result.bound_overhead * program.compute_ns - 1 - program.compute_ns


@pytest.mark.parametrize("seed", SEEDS)
def test_best_schedule_is_the_brute_force_optimum(seed):
    program = small_program(seed, 5)
    for budget in _budgets(program):
        best = brute_force_optimum(program, budget)
        result = solve_optimal(program, budget, time_limit_s=30)
        if best is None:
            assert result.schedule is None and result.status == INFEASIBLE
            continue
        # optimal: the bound meets it; feasible: the refined stages' bound is not one for every schedule
        assert result.status in (OPTIMAL, FEASIBLE) and result.model_optimal, (budget, result)
        assert result.replay.remat_ns == best, (budget, result)
        assert _bound_ns(program, result) <= best + 1e-6
        replay = check_schedule(program, result.schedule, budget)  # the checker's own word, again
        assert replay.peak_bytes <= budget and replay.overhead == result.overhead


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_finds_the_same_optimum(seed):
    program = small_program(seed, 5)
    for budget in _budgets(program):
        best = brute_force_optimum(program, budget)
        result = solve_optimal(program, budget, solver="cpsat", time_limit_s=30, lp_bound=False)
        assert (result.replay.remat_ns if result.replay else None) == best


@pytest.mark.parametrize("seed", range(8))
def test_no_schedule_fits_below_the_least_budget(seed):
    program = small_program(seed, 5)
    low = min_budget_bytes(program)
    assert brute_force_optimum(program, low - 1) is None
    result = solve_optimal(program, low - 1, time_limit_s=30)
    assert result.status == INFEASIBLE and result.schedule is None and result.bound_overhead == math.inf


def test_a_budget_with_room_for_everything_recomputes_nothing():
    program = small_program(3, 8)
    result = solve_optimal(program, baseline(program).peak_bytes, time_limit_s=30)
    assert result.status == OPTIMAL and result.replay.n_recompute == 0
    assert result.overhead == (1 + program.compute_ns) / program.compute_ns


@pytest.mark.parametrize("seed", range(30))
def test_the_crossing_bound_never_exceeds_the_optimum(seed):
    program = small_program(seed, 6)
    for budget in _budgets(program):
        best = brute_force_optimum(program, budget)
        bound = crossing_bound_ns(program, budget)
        if best is not None:
            assert bound <= best


@pytest.mark.slow
@needs_shared
def test_where_dtr_runs_out_its_envelope_starts_the_solve():
    """ResNet-32 at 0.104: DTR runs out of memory (a feasibility inversion), but its run at a slightly
    smaller budget does not, and that schedule fits: the solve returns a schedule within the budget."""
    program = public_program("resnet32")
    budget = budget_from_ratio(program, "0.104")
    result = solve_optimal(program, budget, time_limit_s=5, lp_bound=False)  # the start is found at once
    assert result.dtr_overhead is None
    assert result.schedule is not None and result.replay.peak_bytes <= budget
    assert result.bound_overhead <= result.overhead
