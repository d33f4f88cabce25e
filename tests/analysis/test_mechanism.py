"""Mechanisms: each figure of a signature against an independent computation (the Python engine's event
log counted here, hand-computed OOM states, the engine's own scores), and the study's two cases pinned."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from cases import chain_program, fan_program, synthetic_program
from conftest import TRACES, cli_invoke, golden, needs_compiled, needs_shared, public_program
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtrlab.analysis import mechanism as mech
from dtrlab.analysis.churn import storage_counts
from dtrlab.analysis.divergence import diverge
from dtrlab.analysis.feasibility import inversions
from dtrlab.analysis.oom import explain_oom
from dtrlab.analysis.regimes import switches
from dtrlab.analysis.runs import run_of
from dtrlab.analysis.scan import Budget, scan
from dtrlab.sim.instruments import EVICT, EVICT_EAGER, Instruments
from dtrlab.sim.simulate import baseline, simulate

POLICY, RUNTIME = "dtr", "eager-optimized"


def _evicted_by_events(program, budget_bytes: int) -> Counter:
    """Evictions of each storage, counted from the Python engine's event log (not its counters)."""
    res = simulate(program, budget_bytes, POLICY, RUNTIME, instruments=Instruments(per_storage=False, events=True,
                                                                                 oom_snapshot=False))
    return Counter(e.storage for e in res.observations.events if e.kind in (EVICT, EVICT_EAGER))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), fa=st.floats(0.3, 0.95), fb=st.floats(0.3, 0.95))
def test_churn_figures_match_the_event_log(seed, fa, fb):
    program = synthetic_program(seed, 40)
    peak = baseline(program).peak_bytes
    ra, rb = (run_of(simulate(program, int(peak * f), POLICY, RUNTIME), f) for f in (fa, fb))
    kind = mech.INVERSION if (ra.feasible and not rb.feasible) else mech.SWITCH
    (sig,) = mech.mechanisms(program, [(kind, ra, rb, None)], POLICY, RUNTIME,
                             counts=lambda r: mech.evictions_of(
                                 storage_counts(program, r.budget_bytes, POLICY, RUNTIME)[1]),
                             explain=lambda r: explain_oom(program, r.budget_bytes, POLICY, RUNTIME),
                             divergence=lambda a, b: None)
    ca, cb = _evicted_by_events(program, ra.budget_bytes), _evicted_by_events(program, rb.budget_bytes)
    for side, c in ((sig.reference, ca), (sig.unstable, cb)):
        assert side.evictions == sum(c.values()) and side.distinct_evicted == len(c)
        assert side.per_evicted_storage == (sum(c.values()) / len(c) if c else 0.0)
    either = set(ca) | set(cb)
    assert sig.jaccard == (len(set(ca) & set(cb)) / len(either) if either else 1.0)
    want_rate = sig.unstable.per_evicted_storage / sig.reference.per_evicted_storage \
        if sig.reference.per_evicted_storage else math.inf
    assert sig.churn_rate == want_rate
    # The rules, restated: churn by rate and overlap, frontier only where the pool ran out.
    churn = want_rate >= mech.CHURN_RATE_MIN and sig.jaccard >= mech.CHURN_JACCARD_MIN
    assert sig.unstable.pool_empty == (rb.outcome == "oom")
    assert sig.mechanism in (mech.BOTH, mech.CHURN) if churn else sig.mechanism in (mech.FRONTIER, mech.NEITHER)


def test_frontier_figures_of_a_chain_known_by_hand():
    # w -> x1 -> ... -> x6, 100 B each, all outputs pinned at the end: under 400 B, pinning x4 back
    # (one rematerialization) finds w, x1, x2, x3 pinned (400 B) and needs 100 B more.
    program = chain_program(6)
    run = run_of(simulate(program, 400, POLICY, RUNTIME))
    side = mech.run_side(run, np.zeros(program.n_storages, np.int64), explain_oom(program, 400, POLICY, RUNTIME))
    assert run.outcome == "oom" and side.pool_empty
    assert (side.depth, side.remats, side.pinned_share, side.locked_share) == (1, 1, 1.0, 0.0)
    assert side.over_budget and mech.is_frontier(side)


def test_a_flat_oom_is_no_recursive_frontier():
    # h(a1, ..., a4) with w pinned and its four inputs locked: 600 B > 500 B, but nothing is rematerialized.
    program = fan_program(4)
    run = run_of(simulate(program, 500, POLICY, RUNTIME))
    side = mech.run_side(run, np.zeros(program.n_storages, np.int64), explain_oom(program, 500, POLICY, RUNTIME))
    assert (side.depth, side.remats, side.pinned_share, side.locked_share) == (1, 0, 0.2, 0.8)
    assert side.over_budget and side.pool_empty and not mech.is_frontier(side)


def _diverging_pairs():
    for seed in range(40):
        program = synthetic_program(seed, 50)
        peak = baseline(program).peak_bytes
        for fa, fb in ((0.5, 0.55), (0.6, 0.7), (0.4, 0.45)):
            a, b = Budget(fa, int(peak * fa)), Budget(fb, int(peak * fb))
            d = diverge(program, a, b, POLICY, RUNTIME)
            if d.index is not None and d.a.chosen is not None and d.b.chosen is not None:
                yield d


@pytest.mark.slow
@needs_compiled
def test_flipping_term_decomposes_the_engine_scores():
    """The shares of the rise of log(score x / score y) add up to what the engine's own scores say,
    and the term named is the one with the largest share."""
    seen = Counter()
    for d in _diverging_pairs():
        flip = mech.flipped_by(d)
        seen[flip] += 1
        ta, tb = ({t.storage: t for t in c.candidates} for c in (d.a, d.b))
        x, y = d.a.chosen, d.b.chosen
        if flip == mech.AVAILABILITY:
            assert not all(t.in_pool for t in (ta[x], ta[y], tb[x], tb[y]))
            continue
        if any(t.compute_ns + t.neighborhood_ns == 0 or t.staleness_ns == 0 for t in (ta[x], ta[y], tb[x], tb[y])):
            continue
        rise = {mech.ESTAR: 0.0, mech.SIZE: 0.0, mech.TIMING: 0.0}
        for side, sign in ((tb, 1), (ta, -1)):
            rise[mech.ESTAR] += sign * math.log((side[x].compute_ns + side[x].neighborhood_ns)
                                                / (side[y].compute_ns + side[y].neighborhood_ns))
            rise[mech.SIZE] -= sign * math.log(side[x].size_bytes / side[y].size_bytes)
            rise[mech.TIMING] -= sign * math.log(side[x].staleness_ns / side[y].staleness_ns)
        engine = math.log(tb[x].score / tb[y].score) - math.log(ta[x].score / ta[y].score)
        assert math.isclose(sum(rise.values()), engine, rel_tol=1e-9, abs_tol=1e-12)
        assert engine >= 0  # a chose x over y, b chose y over x
        assert rise[flip] == max(rise.values()) and rise[mech.SIZE] == 0.0
    assert seen[mech.TIMING] > 0  # the programs exercise the decomposition, not only availability


@pytest.mark.slow
@needs_shared
@needs_compiled
@pytest.mark.parametrize("name", ["lstm", "resnet32"])
def test_the_study_cases_are_of_their_kinds(name):
    want = golden("mechanisms_study_cases")[name]
    program = public_program(name)
    runs = scan(program, want["ratios"])
    sigs = mech.measure(program, switches(runs), inversions(runs), POLICY, RUNTIME)
    got = {s.label: s for s in sigs}
    sig = got[want["pair"]]
    assert sig.kind == want["kind"] and sig.mechanism == want["mechanism"]
    assert (sig.divergence_index, sig.flipped_by) == (want["divergence_index"], want["flipped_by"])
    assert (sig.unstable.depth, sig.unstable.remats) == (want["depth"], want["remats"])
    assert f"{sig.churn_rate:.2f}" == want["churn_rate"] and f"{sig.jaccard:.4f}" == want["jaccard"]


@needs_shared
@needs_compiled
def test_scan_mechanisms_prints_one_row_per_instability(tmp_path):
    store = str(tmp_path / "s.duckdb")
    args = ["scan", str(TRACES), "-t", "resnet32", "--ratios", "0.100:0.108:0.001", "--store", store, "--mechanisms"]
    out = cli_invoke(*args, "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert len(doc["mechanisms"]) == len(doc["regime_switches"]) + len(doc["inversions"]) == 1
    row = doc["mechanisms"][0]
    assert (row["pair"], row["kind"], row["mechanism"]) == ("0.101/0.102", "inversion", "frontier")
    text = cli_invoke(*args)
    assert text.exit_code == 0 and "frontier" in text.output and "mechanisms" in text.output
