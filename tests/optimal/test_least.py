"""The least budget (optimal/least.py) against brute force: on small generated programs the true least
budget of any schedule (bisection over the brute-force optimum, feasibility being monotone for the set
of all schedules) lies between the proven floor and the budget at which a schedule was found; that
schedule replays within its budget; DTR's boundary is a budget where DTR's run ends ok."""

from __future__ import annotations

import json

import pytest

from brute import brute_force_optimum, small_program
from conftest import cli_invoke as run
from conftest import needs_shared, public_program
from dtrlab.optimal.least import least_budget
from dtrlab.optimal.solve import portfolio_best
from dtrlab.schedule.check import check_schedule
from dtrlab.sim.simulate import simulate
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import format_trace


def _true_least(program, low: int, high: int) -> int:
    """The least budget at which brute force finds any schedule, exact to the byte."""
    if brute_force_optimum(program, low) is not None:
        return low
    while high - low > 1:
        mid = (low + high) // 2
        if brute_force_optimum(program, mid) is None:
            low = mid
        else:
            high = mid
    return high


@pytest.mark.parametrize("seed", range(10))
def test_the_true_least_budget_lies_between_the_floor_and_the_found(seed):
    program = small_program(seed, 7)
    least = least_budget(program)
    assert least.schedule_found_bytes is not None  # at the peak every program has a schedule
    truth = _true_least(program, least.no_schedule_below_bytes, least.schedule_found_bytes)
    assert least.no_schedule_below_bytes <= truth <= least.schedule_found_bytes
    assert brute_force_optimum(program, least.no_schedule_below_bytes - 1) is None
    _, schedule, maker, _ = portfolio_best(program, least.schedule_found_bytes)[1]
    replay = check_schedule(program, schedule, least.schedule_found_bytes)
    assert replay.peak_bytes <= least.schedule_found_bytes and maker == least.found_maker
    if least.dtr_bytes is not None:
        assert simulate(program, least.dtr_bytes, "dtr").outcome == "ok"
        assert least.schedule_found_bytes <= least.dtr_bytes  # DTR's run is one of the portfolio's


@pytest.mark.slow
@needs_shared
def test_resnet32_has_a_schedule_below_dtrs_least_budget():
    least = least_budget(public_program("resnet32"))
    assert least.no_schedule_below_bytes < least.schedule_found_bytes < least.dtr_bytes
    assert least.found_overhead > 1


def test_the_cli_gives_the_three_budgets_and_refuses_a_budget(tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text(format_trace(synthetic_trace(7, 12, max_args=2, max_outputs=2, size_bytes=(4, 64),
                                                 time_ns=(1, 100))))
    res = run("optimal", path, "--least-budget", "--json", "-q")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["no_schedule_below_bytes"] <= d["schedule_found_bytes"] <= d["peak_bytes"]
    assert d["schedule_found_ratio"] == d["schedule_found_bytes"] / d["peak_bytes"]
    table = run("optimal", path, "--least-budget", "-q")
    assert table.exit_code == 0 and "no schedule fits below" in table.stdout
    bad = run("optimal", path, "--least-budget", "--ratio", "0.5")
    assert bad.exit_code == 2 and "--least-budget" in bad.output
