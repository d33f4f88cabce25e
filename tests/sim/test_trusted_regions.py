"""The compiled engine's trusted regions (reverse and forward): updated in place, they give exactly
the results of traversing afresh, which the pure-Python engine does every time."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dtrlab.sim.cengine import _prepared, run_compiled
from dtrlab.sim.policies import NEIGHBORHOOD, POLICIES, get_policy
from dtrlab.sim.runtimes import get_runtime
from dtrlab.sim.simulate import budget_from_ratio, simulate
from conftest import needs_compiled
from dtrlab.trace import load, shipped_traces
from helpers import synthetic_program

pytestmark = needs_compiled

REGION_POLICIES = sorted(name for name, p in POLICIES.items() if NEIGHBORHOOD in p.needs)
OPTIMIZED = ["optimized", "eager-optimized"]


def _acyclic(program) -> bool:
    """Kahn's algorithm over the storage edges the compiled engine walks."""
    bufs = _prepared(program)
    f_ptr, f_list = bufs["f_ptr"], bufs["f_list"]
    indeg = [0] * program.n_storages
    for y in f_list:
        indeg[y] += 1
    ready = [x for x in range(program.n_storages) if not indeg[x]]
    seen = 0
    while ready:
        x = ready.pop()
        seen += 1
        for y in f_list[f_ptr[x]:f_ptr[x + 1]]:
            indeg[y] -= 1
            if not indeg[y]:
                ready.append(y)
    return seen == program.n_storages


def _agree(program, budget, policy, runtime):
    """The compiled run's counters, after checking them against the Python engine's and, at every
    step, each trusted region against a fresh traversal (the engine's self-check)."""
    a = simulate(program, budget, policy, runtime, engine="python")
    out = run_compiled(program, budget, get_policy(policy), get_runtime(runtime), engine_stats=True,
                       check=True)
    for key in ("outcome", "clock_ns", "remat_ns", "evictions", "eager_evictions",
                "distinct_evicted", "peak_bytes", "score_evals"):
        assert out[key] == getattr(a, key), key
    return out


# Few aliases keep most generated storage graphs acyclic, where regions can be trusted. The
# examples are rare programs where an eviction misses a trusted region holding the evicted storage.
@pytest.mark.slow
@example(2370, 69, 0.05, "dtr", "eager-optimized", 0.383)
@example(94611, 70, 0.05, "ab-e-stale", "optimized", 0.521)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000), st.integers(20, 90), st.sampled_from([0.0, 0.05, 0.1]),
       st.sampled_from(REGION_POLICIES), st.sampled_from(OPTIMIZED), st.floats(0.05, 0.7))
def test_trusted_regions_change_no_result(seed, n_ops, p_alias, policy, runtime, ratio):
    program = synthetic_program(seed, n_ops, p_alias=p_alias)
    _agree(program, budget_from_ratio(program, ratio), policy, runtime)


@pytest.mark.slow
def test_a_thrashing_run_updates_most_reverse_regions_in_place():
    program = next(p for p in load(shipped_traces(), ["resnet32"]))
    assert _acyclic(program)
    out = _agree(program, budget_from_ratio(program, 0.2), "dtr", "eager-optimized")
    assert out["region_updates"] > out["region_rebuilds"] > 0


@pytest.mark.slow
def test_a_rematerialization_chain_hands_its_forward_region_on():
    """Where a rematerialized storage was its input's only consumer out of memory, its forward region is
    the input's, less itself (region_transfer): checked against a fresh traversal at every step."""
    program = next(p for p in load(shipped_traces(), ["resnet32"]))
    out = _agree(program, budget_from_ratio(program, 0.12), "dtr", "eager-optimized")
    assert 0 < out["region_transfers"] < out["region_updates"]


def test_a_cyclic_storage_graph_rebuilds_every_region():
    program = next(p for p in (synthetic_program(s, 60, p_alias=0.3) for s in range(100))
                   if not _acyclic(p))
    for ratio in (0.1, 0.3, 0.6):
        out = _agree(program, budget_from_ratio(program, ratio), "dtr", "eager-optimized")
        assert out["region_updates"] == out["region_transfers"] == 0
        assert out["region_rebuilds"] > 0


@pytest.mark.slow
def test_a_run_without_evictions_walks_a_few_edges_per_operator():
    """Each operator's computation moves its outputs onto the forward regions of its inputs in place:
    at ratio 1.0 the upkeep walks a few edges an operator, however many consumers or released
    descendants an input has (it used to walk them all again at each consumer: 100-300 edges an
    operator on a captured LSTM of 64 steps, growing with the sequence)."""
    for program in load(shipped_traces(), None):
        out = _agree(program, budget_from_ratio(program, 1.0), "dtr", "eager-optimized")
        assert out["evictions"] == 0
        assert out["region_edges"] <= 4 * program.n_ops, program.name
        assert out["region_updates"] > 0
