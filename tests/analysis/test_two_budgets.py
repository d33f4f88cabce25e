"""compare, bisect, diverge and ablate on constructed and synthetic programs (answers by construction
or by brute force), and the CLI on them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cases import chain_program, synthetic_program
from conftest import TRACES, cli_invoke, needs_compiled, needs_shared, public_program

from dtrlab.analysis.ablation import ablate
from dtrlab.analysis.bisect import bisect_budgets
from dtrlab.analysis.churn import compare_runs
from dtrlab.analysis.divergence import diverge
from dtrlab.analysis.scan import Budget, parse_budget, scan
from dtrlab.errors import UsageError
from dtrlab.sim.cengine import run_compiled
from dtrlab.sim.policies import get_policy
from dtrlab.sim.runtimes import get_runtime
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate



def small(seed):
    return synthetic_program(seed, 30, size_bytes=(4, 64), time_ns=(1, 50))


def test_compare_chain_by_construction():
    p = chain_program(4)
    churn = compare_runs(p, Budget(None, 500), Budget(None, 400))
    assert churn.slower == "b" and churn.a.evictions.policy == 0
    assert churn.b.evictions.policy == 3 and churn.b.distinct_evicted.policy == 3
    assert churn.jaccard.policy == 0.0  # a evicts nothing
    assert churn.jaccard.all == 0.0  # no eager evictions either: the sets are {} and {x1, x3, x4}
    assert sorted(s.name for s in churn.top) == ["x1", "x3", "x4"]
    assert churn.extra_remat_ns == churn.b.remat_ns == 20


@pytest.mark.parametrize("seed", range(4))
def test_compare_counts_match_the_runs(seed):
    p = small(seed)
    peak = baseline(p).peak_bytes
    a, b = Budget(None, int(peak * 0.5)), Budget(None, int(peak * 0.7))
    churn = compare_runs(p, a, b, top=5)
    for side, budget in ((churn.a, a), (churn.b, b)):
        res = simulate(p, budget.budget_bytes)
        assert side.evictions.policy == res.evictions
        assert side.evictions.all == res.evictions + res.eager_evictions
        assert side.distinct_evicted.policy == res.distinct_evicted
        assert side.remat_ns == res.remat_ns and side.outcome == res.outcome
    assert 0.0 <= churn.jaccard.policy <= 1.0 and len(churn.top) <= 5


@pytest.mark.parametrize("seed", range(3))
def test_compare_with_the_callers_counts_is_the_compare_that_simulates(seed):
    from dtrlab.analysis.churn import storage_counts

    p = small(seed)
    peak = baseline(p).peak_bytes
    a, b = Budget(None, int(peak * 0.45)), Budget(None, int(peak * 0.65))
    counts = tuple(storage_counts(p, x.budget_bytes, "dtr", "eager-optimized") for x in (a, b))
    assert compare_runs(p, a, b, counts=counts) == compare_runs(p, a, b)
    swapped = compare_runs(p, a, b, counts=counts[::-1])  # the counts are what is compared
    assert (swapped.a.remat_ns, swapped.b.remat_ns) == (counts[1][0]["remat_ns"], counts[0][0]["remat_ns"])


def test_bisect_chain_finds_the_exact_byte():
    # all five 100-byte storages end pinned: 500 bytes are needed, 499 are not enough
    found = bisect_budgets(chain_program(4), 300, 800)
    assert found.mode == "outcome" and found.monotone and found.complete
    (b,) = found.boundaries
    assert (b.lo.budget_bytes, b.lo.outcome, b.hi.budget_bytes, b.hi.outcome) == (499, "oom", 500, "ok")
    assert b.adjacent


@needs_compiled
@pytest.mark.parametrize("seed", range(3))
def test_bisect_agrees_with_brute_force(seed):
    p = small(seed)
    peak = baseline(p).peak_bytes
    lo, hi = 0, peak
    truth = {b: simulate(p, b).outcome for b in range(lo, hi + 1)}
    found = bisect_budgets(p, lo, hi, mode="outcome")
    for r in found.runs:
        assert truth[r.budget_bytes] == r.outcome
    for bd in found.boundaries:
        assert bd.adjacent and truth[bd.lo.budget_bytes] != truth[bd.hi.budget_bytes]
    changes = [b for b in range(lo, hi) if truth[b] != truth[b + 1]]
    assert {bd.lo.budget_bytes for bd in found.boundaries} <= set(changes)
    # the number of changes has the parity of the two ends differing
    assert len(found.boundaries) % 2 == (truth[lo] != truth[hi])


@needs_compiled
@pytest.mark.parametrize("seed", range(6))
def test_diverge_matches_both_eviction_logs(seed):
    p = small(seed)
    peak = baseline(p).peak_bytes
    a, b = Budget(None, int(peak * 0.5)), Budget(None, int(peak * 0.6))
    d = diverge(p, a, b)
    assert d.to_dict() == diverge(p, a, b, engine="python").to_dict()  # either engine's log finds it
    pol, rt = get_policy("dtr"), get_runtime("eager-optimized")
    logs = []
    for budget in (a, b):
        log = run_compiled(p, budget.budget_bytes, pol, rt, events=True)["events"].rows(kind="evict")
        logs.append(np.stack([log.clock_ns, log.storage], axis=1))
    if d.index is None:
        assert len(logs[0]) == len(logs[1]) and np.array_equal(logs[0][:, 1], logs[1][:, 1])
        return
    k = d.index
    assert np.array_equal(logs[0][:k, 1], logs[1][:k, 1])
    for choice, log in ((d.a, logs[0]), (d.b, logs[1])):
        if k < len(log):
            # the Python engine, stopped at the k-th choice, chose what the compiled one logged
            assert choice.chosen == log[k, 1] and choice.clock_ns == log[k, 0]
            chosen = next(t for t in choice.candidates if t.storage == choice.chosen)
            assert chosen.in_pool and all(chosen.score <= t.score for t in choice.candidates if t.in_pool)
        else:
            assert choice.clock_ns is None


@needs_compiled
@pytest.mark.parametrize("seed", range(6))
def test_diverge_on_a_prefix_of_either_log_finds_what_the_whole_logs_find(seed):
    """A run the overhead cap stopped gives only a prefix of its log: cut anywhere (before the
    parting, at it, after it, at nothing), either log or both, the parting and the choices there are
    the whole logs', and a prefix's count in all is None (not known)."""
    p = small(seed)
    peak = baseline(p).peak_bytes
    a, b = Budget(None, int(peak * 0.5)), Budget(None, int(peak * 0.6))
    whole = diverge(p, a, b).to_dict()
    pol, rt = get_policy("dtr"), get_runtime("eager-optimized")
    logs = []
    for budget in (a, b):
        log = run_compiled(p, budget.budget_bytes, pol, rt, events=True)["events"].rows(kind="evict")
        logs.append(np.stack([log.clock_ns, log.storage], axis=1))
    k = whole["index"] if whole["index"] is not None else min(map(len, logs))
    cuts = sorted({0, max(k - 1, 0), k, k + 1, *map(len, logs)})
    for side in ((True, False), (False, True), (False, False)):
        for cut in cuts:
            given = tuple(log if w else log[:cut] for log, w in zip(logs, side))
            totals = tuple(len(log) if w else None for log, w in zip(logs, side))  # a cut log's: unknown
            got = diverge(p, a, b, logs=given, totals=totals).to_dict()
            # a prefix that holds the parting is used as it is (its count in all stays unknown);
            # one that ends before it is run whole
            inside = whole["index"] is not None and all(len(g) > k or w for g, w in zip(given, side))
            for name, w in zip(("evictions_a", "evictions_b"), side):
                assert got[name] == (whole[name] if w or not inside else None), (side, cut)
            assert {**got, "evictions_a": 0, "evictions_b": 0} == {**whole, "evictions_a": 0, "evictions_b": 0}


def test_diverge_of_a_random_policy_is_a_usage_error():
    with pytest.raises(UsageError):
        diverge(chain_program(4), Budget(None, 400), Budget(None, 300), policy="random")


def _ablation_oracle(program, ratios, policy, factor):
    """An ablation row computed from `simulate` alone: feasible budgets, then the switches between
    consecutive feasible budgets and the stretches of failures with a success on both sides."""
    budgets = sorted((budget_from_ratio(program, r), r) for r in ratios)
    runs = [(r, simulate(program, b, policy)) for b, r in budgets]
    ok = [(r, res.overhead) for r, res in runs if res.outcome == "ok"]
    factors = [max(a, b) / min(a, b) for (_, a), (_, b) in zip(ok, ok[1:])]
    factors = [f for f in factors if f > factor]
    marks = "".join("o" if res.outcome == "ok" else "x" for _, res in runs).strip("x")
    stretches = [x for x in marks.split("o") if x]
    return (len(runs), len(ok), min((r for r, _ in ok), default=None), len(factors),
            max(factors, default=None), len(stretches), sum(map(len, stretches)))


@pytest.mark.parametrize("seed", range(6))
def test_ablate_rows_match_an_oracle_built_on_simulate(seed):
    p = small(seed)
    ratios = [round(0.2 + 0.05 * i, 2) for i in range(17)]
    policies = ["ab-e-size-stale", "ab-local", "ab-eq-stale", "ab-none-size"]
    rows = ablate(p, ratios, policies=policies, factor=1.05)
    assert [r.policy for r in rows] == policies
    for row in rows:
        assert (row.runs, row.feasible, row.min_feasible_ratio, row.switches, row.max_factor, row.inversions,
                row.infeasible_inside) == _ablation_oracle(p, ratios, row.policy, 1.05)


def test_the_ablation_oracle_sees_switches_and_failures():
    """The generated programs above exercise every column: some switch, some fail."""
    seen = [_ablation_oracle(small(seed), [round(0.2 + 0.05 * i, 2) for i in range(17)], "ab-local", 1.05)
            for seed in range(6)]
    assert any(row[3] > 0 for row in seen) and any(row[1] < row[0] for row in seen)


def test_parse_budget_ratio_or_bytes():
    p = chain_program(4)
    assert parse_budget(p, "0.8") == Budget(0.8, 400)
    assert parse_budget(p, "450") == Budget(None, 450)
    assert parse_budget(p, "1.5") == Budget(1.5, 750)  # a decimal point: a ratio, above 1 too
    for bad in ("-3", "x", "0"):
        with pytest.raises(UsageError):
            parse_budget(p, bad)


@needs_shared
def test_cli_on_resnet32():
    def run(*args):
        res = cli_invoke(*args)
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    out = run("bisect", TRACES, "-t", "resnet32", "--between", "0.101", "0.102", "--json")
    assert out["mode"] == "outcome" and out["boundaries"]
    for b in out["boundaries"]:
        assert b["adjacent"] and b["hi"]["budget_bytes"] - b["lo"]["budget_bytes"] == 1
        assert b["lo"]["outcome"] != b["hi"]["outcome"]
    out = run("diverge", TRACES, "-t", "resnet32", "--between", "0.110", "0.111", "--json")
    assert out["index"] is not None and out["a"]["chosen"] != out["b"]["chosen"]
    out = run("compare", TRACES, "-t", "resnet32", "--between", "0.110", "0.111", "--json")
    assert out["slower"] == "b" and out["extra_remat_ns"] == out["b"]["remat_ns"] - out["a"]["remat_ns"] > 0
    # ab-e-size-stale is DTR's own score: same runs as dtr
    rows = run("ablate", TRACES, "-t", "resnet32", "-r", "0.100:0.108:0.002", "--json")
    dtr = scan(public_program("resnet32"), [0.1, 0.102, 0.104, 0.106, 0.108], "dtr")
    row = next(r for r in rows if r["policy"] == "ab-e-size-stale")
    assert row["feasible"] == sum(r.feasible for r in dtr) and len(rows) == 16
