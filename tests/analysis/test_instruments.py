"""Instruments: per-storage counts agree with the run's totals and with the compiled engine."""

from __future__ import annotations

import numpy as np
import pytest
from cases import chain_program, fan_program, synthetic_program
from conftest import have_compiled, needs_shared, public_program

from dtrlab.sim.cengine import run_compiled
from dtrlab.sim.instruments import LOCKED, PINNED_CONSTANT, Instruments
from dtrlab.sim.policies import get_policy
from dtrlab.sim.runtimes import get_runtime
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate

ALL = Instruments(per_storage=True, memory_series=True, events=True, oom_snapshot=True)


def _check_against(program, budget_bytes, policy="dtr", runtime="eager-optimized"):
    res = simulate(program, budget_bytes, policy, runtime, instruments=ALL)
    o = res.observations
    assert res.engine == "python"
    assert int(o.policy_evictions.sum()) == res.evictions
    assert int(o.eager_evictions.sum()) == res.eager_evictions
    assert len(o.evicted) == res.distinct_evicted
    assert set(np.flatnonzero(o.policy_evictions)) == o.evicted
    # every memory point is within the run's peak, and the clock never goes back
    if len(o.memory_series):
        assert o.memory_series[:, 1].max() <= res.peak_bytes
        assert (np.diff(o.memory_series[:, 0]) >= 0).all()
    if have_compiled():
        c = run_compiled(program, budget_bytes, get_policy(policy), get_runtime(runtime), counts=True)
        sc = c["storage_counts"]
        assert np.array_equal(sc["policy_evictions"], o.policy_evictions)
        assert np.array_equal(sc["eager_evictions"], o.eager_evictions)
        assert np.array_equal(sc["rematerializations"], o.rematerializations)
    return res


def test_chain_counts_known_by_construction():
    # w -> x1 -> x2 -> x3 -> x4, 100 bytes each, all kept to the end and pinned there.
    p = chain_program(4)
    assert baseline(p).peak_bytes == 500
    res = simulate(p, 500, instruments=ALL)
    assert res.ok and res.observations.policy_evictions.sum() == 0 and res.observations.oom is None
    # Under 400 bytes x1..x3 must make room for x4; pinning them back at the end runs out.
    res = _check_against(p, 400)
    assert res.outcome == "oom"
    o = res.observations
    assert o.policy_evictions.tolist() == [0, 1, 0, 1, 1]
    assert o.rematerializations.tolist() == [0, 1, 0, 1, 0]
    assert o.oom.memory_bytes == 400 and o.oom.need_bytes == 100 and o.oom.pool_size == 0


def test_eager_evictions_are_the_released_storages():
    p = chain_program(4, release=(1, 2))
    res = _check_against(p, 10_000)
    assert res.ok and res.observations.eager_evictions.tolist() == [0, 1, 1, 0, 0]
    assert res.evictions == 0


def test_oom_snapshot_names_locked_inputs():
    # h(a1, a2, a3) needs 100 more bytes with w pinned and its three inputs locked: 500 > 400.
    res = simulate(fan_program(3), 400, instruments=Instruments())
    snap = res.observations.oom
    assert res.outcome == "oom" and snap.pool_size == 0
    reasons = {r.storage: r.reason for r in snap.residents}
    assert reasons == {0: PINNED_CONSTANT, 1: LOCKED, 2: LOCKED, 3: LOCKED}
    assert [f.depth for f in snap.frames] == [0]


def test_instruments_off_parts_are_none():
    res = simulate(chain_program(3), 10_000, instruments=Instruments(per_storage=False, oom_snapshot=False))
    o = res.observations
    assert o.policy_evictions is None and o.memory_series is None and o.events is None and o.evicted is None


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", ["dtr", "lru", "dtr-eq"])
def test_synthetic_counts_agree(seed, policy):
    p = synthetic_program(seed, 60)
    peak = baseline(p).peak_bytes
    for frac in (0.4, 0.6, 0.8):
        _check_against(p, int(peak * frac), policy)


@needs_shared
@pytest.mark.parametrize("ratio", [0.104, 0.3])
def test_resnet32_counts_agree(ratio):
    p = public_program("resnet32")
    _check_against(p, budget_from_ratio(p, ratio))
