"""Instruments: per-storage counts, the event log and the OOM snapshot agree with the run's totals,
with a recomputation from scratch, with the score formula, and between the two engines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cases import chain_program, fan_program, synthetic_program
from conftest import have_compiled, needs_compiled, needs_shared, public_program
from helpers import assert_same_observations, every_instrument

from dtrlab.sim import formula as fm
from dtrlab.sim import pyengine
from dtrlab.sim.instruments import (EVENT_KINDS, EVICT, EVICT_EAGER, LOCK, LOCKED, PINNED_CONSTANT, REMAT,
                                    Instruments, Observer)
from dtrlab.sim.policies import get_policy
from dtrlab.sim.runtimes import get_runtime
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate

ALL = every_instrument()


def _check_against(program, budget_bytes, policy="dtr", runtime="eager-optimized"):
    res = simulate(program, budget_bytes, policy, runtime, instruments=ALL, engine="python")
    o = res.observations
    assert int(o.policy_evictions.sum()) == res.evictions
    assert int(o.eager_evictions.sum()) == res.eager_evictions
    assert len(o.evicted) == res.distinct_evicted
    assert set(np.flatnonzero(o.policy_evictions)) == o.evicted
    # every memory point is within the run's peak, and the clock never goes back
    if len(o.memory_series):
        assert o.memory_series[:, 1].max() <= res.peak_bytes
        assert (np.diff(o.memory_series[:, 0]) >= 0).all()
    log = o.events
    assert len(log.rows(kind=EVICT)) == res.evictions and len(log.rows(kind=EVICT_EAGER)) == res.eager_evictions
    if have_compiled():
        c = simulate(program, budget_bytes, policy, runtime, instruments=ALL)
        assert c.engine == "c" and dict(c.to_dict(), engine="python") == res.to_dict()
        assert_same_observations(o, c.observations)
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
    # the log by construction: x1..x4 computed at depth 0 by the schedule, x1 and x3 recomputed
    remats = o.events.rows(kind=REMAT)
    assert remats.storage.tolist() == [1, 3] and (remats.depth >= 0).all()
    assert o.events.rows(kind="compute").storage.tolist() == [0, 1, 2, 3, 4]


def test_eager_evictions_are_the_released_storages():
    p = chain_program(4, release=(1, 2))
    res = _check_against(p, 10_000)
    assert res.ok and res.observations.eager_evictions.tolist() == [0, 1, 1, 0, 0]
    assert res.evictions == 0
    assert res.observations.events.rows(kind=EVICT_EAGER).storage.tolist() == [1, 2]


def test_oom_snapshot_names_locked_inputs():
    # h(a1, a2, a3) needs 100 more bytes with w pinned and its three inputs locked: 500 > 400.
    for engine in ("python", "c") if have_compiled() else ("python",):
        res = simulate(fan_program(3), 400, instruments=Instruments(), engine=engine)
        snap = res.observations.oom
        assert res.outcome == "oom" and snap.pool_size == 0
        reasons = {r.storage: r.reason for r in snap.residents}
        assert reasons == {0: PINNED_CONSTANT, 1: LOCKED, 2: LOCKED, 3: LOCKED}
        assert [f.depth for f in snap.frames] == [0]


def test_instruments_off_parts_are_none():
    for engine in ("python", "c") if have_compiled() else ("python",):
        res = simulate(chain_program(3), 10_000, instruments=Instruments(per_storage=False, oom_snapshot=False),
                       engine=engine)
        o = res.observations
        assert o.policy_evictions is None and o.memory_series is None and o.events is None and o.evicted is None


class _FromScratch(Observer):
    """The Python engine's observer, checking each row's state columns against the engine's state
    summed from scratch at that moment (the log keeps them incrementally)."""

    def _row(self, engine, kind, s, t=-1, depth=-1, score=math.nan, terms=None):
        super()._row(engine, kind, s, t, depth, score, terms)
        resident = [x for x in range(len(engine.material)) if engine.material[x]]
        pinned = sum(engine.s_size[x] for x in resident if engine.pinned[x])
        locked = sum(engine.s_size[x] for x in resident if not engine.pinned[x] and engine.ref_int[x] > 0)
        c = self.cols
        assert (c["pinned_bytes"][-1], c["locked_bytes"][-1]) == (pinned, locked)
        assert c["pool_size"][-1] == sum(1 for x in resident if x in engine.pool)
        if kind in ("compute", "remat"):
            assert depth == len(self._stack) - 1 and engine.material[s]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy, runtime", [("dtr", "eager-optimized"), ("dtr-eq", "optimized"),
                                             ("dtr-unopt", "lazy"), ("random", "eager"), ("lru", "banishing")])
def test_event_log_state_columns_equal_a_recount(seed, policy, runtime):
    p = synthetic_program(seed, 50)
    pol, rt = get_policy(policy), get_runtime(runtime)
    for frac in (0.4, 0.7):
        obs = _FromScratch(ALL, p)
        engine = pyengine.Engine(p, int(baseline(p).peak_bytes * frac), pol, rt, math.inf, seed, obs)
        outcome = engine.run()
        log = obs.finish(engine, outcome).events
        assert len(log.rows(kind="compute")) >= (p.n_ops if outcome == "ok" else 1)
        assert int(log.rows(kind=LOCK).storage.size) > 0
        # a rematerialization's time is the cost of its operator: the log's remat rows add up
        remat = log.rows(kind=REMAT)
        assert int(p.op_cost_ns[p.tensor_op[remat.tensor]].sum()) == engine.remat_ns


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["dtr", "dtr-eq", "msps", "lru", "ab-local-size",
                                    "score: (compute + estar) / (size * staleness ** 2) + evictions"])
def test_eviction_rows_score_is_the_formula_of_their_terms(seed, policy):
    """Each policy eviction's score is the policy's formula evaluated on the row's terms."""
    p = synthetic_program(seed, 50)
    pol = get_policy(policy)
    res = simulate(p, int(baseline(p).peak_bytes * 0.4), pol, instruments=ALL, engine="python")
    log = res.observations.events
    ev = log.rows(kind=EVICT)
    assert len(ev) == res.evictions > 0
    assert log.term_names == tuple(f for f in fm.FEATURES if f in pol.formula.features)
    assert np.isnan(log.rows(kind=("compute", "remat", "lock", "evict_eager")).score).all()
    for score, terms in zip(ev.score.tolist(), ev.terms.tolist()):
        values = {n: int(v) if math.isfinite(v) else v for n, v in zip(log.term_names, terms)}
        assert float(fm.evaluate(pol.formula, values)) == score


def test_event_iteration_and_filters():
    res = simulate(chain_program(4), 400, instruments=ALL)
    log = res.observations.events
    events = list(log)
    assert [e.kind for e in events] == [list(EVENT_KINDS)[k] for k in log.kind.tolist()]
    assert len(log.rows(kind=("evict", "evict_eager"))) == res.evictions + res.eager_evictions
    with pytest.raises(ValueError, match="unknown event kind"):
        log.rows(kind="evicted")


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


@needs_shared
@needs_compiled
@pytest.mark.parametrize("ratio", [0.102, 0.103, 0.104, 0.105, 0.106])
def test_resnet32_oom_snapshot_is_the_same_from_both_engines(ratio):
    p = public_program("resnet32")
    budget = budget_from_ratio(p, ratio)
    ins = Instruments(per_storage=False, oom_snapshot=True)
    a = simulate(p, budget, instruments=ins, engine="python").observations.oom
    b = simulate(p, budget, instruments=ins, engine="c").observations.oom
    assert a is not None and a == b and len(a.frames) > 10


@pytest.mark.slow
@needs_shared
@needs_compiled
def test_lstm_event_log_is_the_same_from_both_engines():
    """The LSTM at 0.265 (eager-optimized dtr, 33,229 events): the Python engine takes minutes for
    the whole run, so both engines stop at an overhead of 1.02 (the first ~15,000 events) and
    agree row for row; the compiled engine's whole run begins with exactly those rows."""
    p = public_program("lstm")
    budget = budget_from_ratio(p, 0.265)
    ins = Instruments(per_storage=True, events=True, oom_snapshot=False)
    a = simulate(p, budget, instruments=ins, engine="python", overhead_limit=1.02)
    b = simulate(p, budget, instruments=ins, engine="c", overhead_limit=1.02)
    assert a.outcome == b.outcome == "remat_limit" and dict(b.to_dict(), engine="python") == a.to_dict()
    for name in ("policy_evictions", "eager_evictions", "rematerializations"):
        assert np.array_equal(getattr(a.observations, name), getattr(b.observations, name))
    la, lb = a.observations.events, b.observations.events
    assert len(la) > 10_000 and la.equals(lb)
    whole = simulate(p, budget, instruments=ins)
    log = whole.observations.events
    assert whole.ok and log.select(np.arange(len(la))).equals(la)
    assert len(log.rows(kind=EVICT)) == whole.evictions and len(log.rows(kind=EVICT_EAGER)) == whole.eager_evictions
