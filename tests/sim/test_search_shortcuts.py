"""The eviction search's shortcuts (runtime options `+sample`, `+small`): both engines take the same
decisions with them, each does what it says on a trace built by hand, and the exact search stays the
default."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import needs_compiled, needs_shared, public_program
from dtrlab.errors import UsageError
from dtrlab.sim.instruments import Instruments
from dtrlab.sim.runtimes import SMALL_PERCENT, get_runtime
from dtrlab.sim.simulate import budget_from_ratio, simulate
from dtrlab.trace.read import Call, Memory, Alias, Release
from helpers import engines_observe_alike, program_of, synthetic_program

SHORTCUTS = ("eager-optimized+sample", "eager-optimized+small", "eager-optimized+sample+small",
             "optimized+sample")


def test_a_runtime_takes_its_search_options_by_name():
    rt = get_runtime("Eager-Optimized + small + sample")
    assert (rt.name, rt.sample, rt.small_percent) == ("eager-optimized+sample+small", True, SMALL_PERCENT)
    assert get_runtime("RuntimeV2EagerOptimized+sample").name == "eager-optimized+sample"
    exact = get_runtime("eager-optimized")
    assert (exact.sample, exact.small_percent) == (False, 0)
    with pytest.raises(UsageError, match=r"unknown search option 'fast' .* \(known: sample, small\)"):
        get_runtime("eager-optimized+fast")


@pytest.mark.slow
@needs_compiled
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), ratio=st.sampled_from([0.9, 0.6, 0.4, 0.25]),
       runtime=st.sampled_from(SHORTCUTS), policy=st.sampled_from(["dtr", "lru", "dtr-eq", "size"]))
def test_both_engines_take_the_same_decisions_with_the_shortcuts(seed, ratio, runtime, policy):
    program = synthetic_program(seed, 120)
    engines_observe_alike(program, budget_from_ratio(program, ratio), policy, runtime, seed=seed)


def _stale_tiny_storage():
    """t (4 B) computed first, so stalest; then big1, big2 (1,000 B each); then `out` (1,000 B)
    needs 4 B more than a budget of 3,000 B leaves."""
    lines = []
    for name, size in (("t", 4), ("big1", 1000), ("big2", 1000), ("out", 1000)):
        lines += [Call(len(lines) + 1, "op_" + name, (), (name,), 10),
                  Memory(len(lines) + 2, name, size), Alias(len(lines) + 3, name, -1)]
    lines.append(Release(len(lines) + 1, "out"))
    return program_of(lines, "stale-tiny")


def _first_policy_eviction(program, runtime):
    result = simulate(program, 3000, "lru", runtime, instruments=Instruments(events=True))
    evicted = result.observations.events.rows("evict")
    return program.storage_size_bytes[int(evicted.columns()["storage"][0])]


@pytest.mark.parametrize("engine", ["python", pytest.param("c", marks=needs_compiled)])
def test_small_leaves_the_stalest_tiny_storage_out_of_the_search(engine):
    program = _stale_tiny_storage()
    # the pool holds 4 + 1,000 + 1,000 B: 1% of its mean is 6.68 B, so t is small
    assert 4 * 3 * 100 < 2004 * SMALL_PERCENT
    assert simulate(program, 3000, "lru", "eager-optimized", engine=engine).evictions == 1
    assert _first_policy_eviction(program, "eager-optimized") == 4  # exact LRU: the stalest, t
    assert _first_policy_eviction(program, "eager-optimized+small") == 1000  # t left out: big1


@needs_compiled
@needs_shared
def test_a_sample_scores_at_most_the_square_root_of_the_pool_each_eviction():
    program = public_program("lstm")
    budget = budget_from_ratio(program, 0.3)
    exact = simulate(program, budget, "dtr", "eager-optimized")
    sampled = simulate(program, budget, "dtr", "eager-optimized+sample", seed=1)
    assert sampled.evictions > 0
    bound = math.isqrt(program.n_storages - 1) + 1
    assert sampled.score_evals <= sampled.evictions * bound < exact.score_evals
    assert simulate(program, budget, "dtr", "eager-optimized+sample", seed=1).to_dict() == sampled.to_dict()
    other = simulate(program, budget, "dtr", "eager-optimized+sample", seed=2)
    assert other.to_dict() != sampled.to_dict()  # the seed draws the sample
