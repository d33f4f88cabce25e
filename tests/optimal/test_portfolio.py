"""Without the model (`--bound-only`), the best schedule is the portfolio's: the least recompute
among the portfolio's own runs at the budget and at the envelope's smaller budgets (each simulated
here) and the chain schedule, replayed by the checker within the budget, never below the crossing bound."""

from __future__ import annotations

import pytest

from conftest import needs_shared, public_program
from dtrlab.defaults import REPORT_OVERHEAD_LIMIT
from dtrlab.optimal.chain import best_chain_schedule
from dtrlab.optimal.defaults import CHAIN_MAKER, PORTFOLIO, SolveSettings
from dtrlab.optimal.solve import ENVELOPE_SCALES, solve
from dtrlab.sim.simulate import budget_from_ratio, simulate


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("name, ratio", [("resnet32", "0.2"), ("unet", "0.4"), ("resnet32", "0.104")])
def test_the_portfolio_s_best_is_the_least_of_its_runs_and_replays_within_the_budget(name, ratio):
    program = public_program(name)
    budget = budget_from_ratio(program, ratio)
    result = solve(program, budget, SolveSettings(bound_only=True))
    runs = {(policy, scale): simulate(program, int(budget * scale), policy)
            for policy in PORTFOLIO for scale in (1.0, *ENVELOPE_SCALES)}
    ok = {k: r.remat_ns for k, r in runs.items() if r.outcome == "ok"}
    chained = best_chain_schedule(program, budget, remat_limit_ns=(REPORT_OVERHEAD_LIMIT - 1) * program.compute_ns)
    if chained is not None:
        ok[(CHAIN_MAKER, 1.0)] = chained.remat_ns
    least = min(ok.values())
    assert result.replay.remat_ns == least and result.replay.peak_bytes <= budget
    assert result.solver in {f"portfolio:{p}" for (p, _), remat in ok.items() if remat == least}
    assert result.bound_overhead <= result.overhead
    dtr = runs[("dtr", 1.0)]
    assert result.dtr_overhead == (dtr.overhead if dtr.outcome == "ok" else None)
    if result.dtr_overhead is not None:
        assert result.overhead <= result.dtr_overhead
