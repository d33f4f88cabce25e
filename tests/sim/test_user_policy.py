"""A user's policy, written in Python over StorageFeatures, runs in lockstep with the built-in one."""

from __future__ import annotations

import pytest

from conftest import needs_shared, public_program
from dtrlab.errors import UsageError
from dtrlab.sim.policies import NEIGHBORHOOD, POLICIES, register_policy
from dtrlab.sim.simulate import budget_from_ratio, simulate
from helpers import synthetic_program


@pytest.fixture
def my_dtr():
    def score(f):
        den = f.size_bytes * f.staleness_ns
        return (f.compute_ns + f.neighborhood_ns) / den if den > 0 else float("inf")

    policy = register_policy("test-my-dtr", score, {NEIGHBORHOOD}, description="DTR, restated")
    yield policy
    del POLICIES[policy.name]


@needs_shared
@pytest.mark.parametrize("ratio", [0.2, 0.35, 0.6])
def test_user_policy_matches_builtin_on_a_public_trace(my_dtr, ratio):
    program = public_program("resnet32")
    budget = budget_from_ratio(program, ratio)
    mine = simulate(program, budget, my_dtr)
    builtin = simulate(program, budget, "dtr")
    assert mine.engine == "python"
    assert (mine.outcome, mine.clock_ns, mine.evictions, mine.eager_evictions, mine.distinct_evicted) == \
        (builtin.outcome, builtin.clock_ns, builtin.evictions, builtin.eager_evictions, builtin.distinct_evicted)


@pytest.mark.parametrize("seed", range(5))
def test_user_policy_matches_builtin_on_synthetic_programs(my_dtr, seed):
    program = synthetic_program(seed, 80)
    for ratio in (0.3, 0.5, 0.8):
        budget = budget_from_ratio(program, ratio)
        a, b = simulate(program, budget, my_dtr), simulate(program, budget, "dtr")
        assert (a.outcome, a.clock_ns, a.evictions) == (b.outcome, b.clock_ns, b.evictions)


def test_registry_rejects_duplicates_and_unknown_features(my_dtr):
    with pytest.raises(UsageError):
        register_policy("test-my-dtr", lambda f: 0.0)
    with pytest.raises(UsageError):
        register_policy("test-other", lambda f: 0.0, {"telepathy"})


def test_neighbourhood_policy_needs_an_optimized_runtime(my_dtr):
    with pytest.raises(UsageError, match="optimized"):
        simulate(synthetic_program(1), 10, my_dtr, "lazy")
