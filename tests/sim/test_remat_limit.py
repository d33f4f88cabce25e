"""The overhead limit: a run stops with outcome remat_limit once recompute passes
(overhead_limit - 1) x baseline compute, on both engines alike."""

from __future__ import annotations

import pytest

from conftest import require_compiled
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate
from helpers import synthetic_program

ENGINES = ["python", "c"]


@pytest.mark.parametrize("seed", range(6))
def test_limit_stops_exactly_past_the_threshold(seed):
    program = synthetic_program(seed, 80)
    budget = budget_from_ratio(program, 0.7)
    free = simulate(program, budget, "dtr")
    assert free.outcome == "ok" and free.remat_ns > 0  # these programs recompute at 0.7
    compute = baseline(program).compute_ns
    enough = 1 + free.remat_ns / compute + 1e-9
    half = 1 + free.remat_ns / compute / 2
    require_compiled()
    results = []
    for engine in ENGINES:
        done = simulate(program, budget, "dtr", overhead_limit=enough, engine=engine)
        assert done.outcome == "ok" and done.clock_ns == free.clock_ns
        cut = simulate(program, budget, "dtr", overhead_limit=half, engine=engine)
        assert cut.outcome == "remat_limit"
        assert cut.remat_ns > compute * (half - 1)  # it stops only once past the limit
        assert cut.clock_ns < free.clock_ns
        d = cut.to_dict()
        d.pop("engine")
        results.append(d)
    assert all(r == results[0] for r in results)
