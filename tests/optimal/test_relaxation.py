"""The bound's warrant: any valid schedule, read as a point of the first (relaxed) model, satisfies
every row, so the model's optimum, and its bound, are at most that schedule's recompute. Checked with
DTR's own schedules, which the checker accepts, on generated programs and on ResNet-32."""

from __future__ import annotations

import numpy as np
import pytest

from brute import small_program
from conftest import needs_shared, public_program
from dtrlab.optimal.graph import item_graph
from dtrlab.optimal.model import build_milp
from dtrlab.optimal.warm import start_of_schedule
from dtrlab.schedule.check import check_schedule
from dtrlab.schedule.emit import simulate_schedule
from dtrlab.sim.simulate import baseline, budget_from_ratio


def _assert_in_relaxation(program, budget):
    result, schedule = simulate_schedule(program, budget, "dtr")
    if result.outcome != "ok":
        return False
    replay = check_schedule(program, schedule, budget)
    g = item_graph(program)
    m = build_milp(g, budget)
    x = start_of_schedule(program, g, m, schedule)
    assert set(np.unique(x)) <= {0.0, 1.0}
    lhs = np.add.reduceat(m.row_val * x[m.row_idx], m.row_ptr[:-1]) if m.n_rows else np.zeros(0)
    lhs[np.diff(m.row_ptr) == 0] = 0
    assert np.all(lhs >= m.row_lb) and np.all(lhs <= m.row_ub)
    assert m.col_cost @ x <= replay.remat_ns
    return True


def test_dtr_schedules_of_generated_programs_lie_in_the_relaxation():
    ran = 0
    for seed in range(20):
        program = small_program(seed, 10)
        peak = baseline(program).peak_bytes
        ran += sum(_assert_in_relaxation(program, int(peak * f)) for f in (0.6, 0.75, 0.9))
    assert ran >= 20  # DTR runs (and recomputes) under enough of these budgets for the check to bite


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("ratio", ["0.2", "0.5"])
def test_dtr_schedules_of_resnet32_lie_in_the_relaxation(ratio):
    program = public_program("resnet32")
    assert _assert_in_relaxation(program, budget_from_ratio(program, ratio))


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("name, ratio", [("resnet32", "0.1"), ("resnet32", "0.5"), ("unet", "0.6")])
def test_the_crossing_bound_is_below_dtr_on_public_traces(name, ratio):
    """DTR's run is a schedule: no valid bound may exceed it (and the bound is not trivial)."""
    from dtrlab.optimal.solve import crossing_bound

    program = public_program(name)
    result = crossing_bound(program, budget_from_ratio(program, ratio))
    assert 1.0 < result.bound_overhead <= result.dtr_overhead
