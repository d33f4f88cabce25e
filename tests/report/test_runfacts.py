"""report.runfacts: the facts of a run simulated on worker processes are those of the run simulated
here with the consumers' own paths (analysis.churn's counts, the event log's deepest moment and
policy evictions); a run the overhead cap stopped is the run as far as the cap let it go; a head
shorter than the log says so; what the memo has is never simulated again."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

from conftest import needs_compiled, needs_shared, public_program
from dtrlab.analysis.churn import storage_counts
from dtrlab.analysis.divergence import policy_log
from dtrlab.analysis.mechanism import event_log, worst_moment
from dtrlab.defaults import REPORT_OVERHEAD_LIMIT
from dtrlab.report import runfacts
from dtrlab.sim.result import OK, OOM, REMAT_LIMIT
from dtrlab.sim.simulate import budget_from_ratio

pytestmark = [needs_shared, needs_compiled]

Run = namedtuple("Run", "budget_bytes outcome")


@pytest.mark.slow
def test_facts_from_workers_are_the_runs_own_and_simulated_once(tmp_path, monkeypatch):
    program = public_program("lstm")
    # a fast run, a thrash the cap stops, an out-of-memory run (the public study's outcomes there)
    runs = [Run(budget_from_ratio(program, r), outcome) for r, outcome in (("0.3", OK), ("0.212", REMAT_LIMIT),
                                                                             ("0.15", OOM))]
    assert runfacts.prefetch(tmp_path, [(program, run) for run in runs * 2], REPORT_OVERHEAD_LIMIT, workers=2) == 3

    def simulate(*args):
        raise AssertionError("simulated again")
    monkeypatch.setattr(runfacts, "_simulate", simulate)
    assert runfacts.prefetch(tmp_path, [(program, run) for run in runs], REPORT_OVERHEAD_LIMIT, workers=2) == 0
    heads = []
    for run in runs:
        got = runfacts.facts(tmp_path, program, run, REPORT_OVERHEAD_LIMIT)
        limit = REPORT_OVERHEAD_LIMIT if run.outcome == REMAT_LIMIT else None
        counters, arrays = storage_counts(program, run.budget_bytes, "dtr", "eager-optimized", limit)
        assert got.counters["outcome"] == counters["outcome"] == run.outcome
        assert got.counters["clock_ns"] == counters["clock_ns"]
        assert set(got.arrays) == set(arrays)
        assert all(np.array_equal(got.arrays[k], arrays[k]) for k in arrays)
        events = event_log(program, run.budget_bytes, "dtr", "eager-optimized", limit)
        log = policy_log(events)
        assert got.deepest == worst_moment(events)
        assert got.policy_evictions == len(log) and np.array_equal(got.head, log[:runfacts.HEAD_EVICTIONS])
        assert got.capped == (limit is not None)
        whole = not got.capped and len(got.head) == got.policy_evictions  # the head is the whole log
        assert whole == (limit is None and len(log) <= runfacts.HEAD_EVICTIONS)
        heads.append(len(log) > runfacts.HEAD_EVICTIONS)
    assert any(heads)  # the thrash's log is longer than its head


@pytest.mark.slow
def test_a_sweep_keeps_the_facts_of_the_runs_it_stores(tmp_path, monkeypatch):
    from conftest import TRACES
    from dtrlab.sim.simulate import simulate
    from dtrlab.sweep.grid import build_specs
    from dtrlab.sweep.run import run_sweep
    from dtrlab.sweep.store import Store

    program = public_program("lstm")
    # the same three outcomes; and a policy that keeps nothing (not the subject's)
    specs = build_specs(str(TRACES), [program], ["dtr", "lru"], ["eager-optimized"], [0.3, 0.212, 0.15],
                        overhead_limit=REPORT_OVERHEAD_LIMIT)
    kept = runfacts.keeping(specs, tmp_path)
    assert [s.keep is not None for s in kept] == [s.policy == "dtr" for s in specs]
    assert [s.key for s in kept] == [s.key for s in specs]  # the same rows
    with Store(tmp_path / "runs.duckdb") as store:
        assert run_sweep(kept, store, workers=2, progress=False).ran == 6
        rows = store.rows(s.key for s in specs).set_index("key")
    for spec in specs:  # each row is simulate()'s
        plain = simulate(program, spec.budget_bytes, spec.policy, overhead_limit=REPORT_OVERHEAD_LIMIT)
        row = rows.loc[spec.key]
        assert (row["outcome"], row["clock_ns"], row["evictions"], row["peak_bytes"]) == (
            plain.outcome, plain.clock_ns, plain.evictions, plain.peak_bytes)

    dtr = [Run(s.budget_bytes, rows.loc[s.key]["outcome"]) for s in specs if s.policy == "dtr"]
    assert sorted(r.outcome for r in dtr) == sorted([OK, REMAT_LIMIT, OOM])
    # what prefetch would simulate: the uncapped run where the cap did not stop it
    expected = [runfacts._simulate(program, r.budget_bytes, REPORT_OVERHEAD_LIMIT if r.outcome == REMAT_LIMIT else None)
                for r in dtr]

    def simulate_again(*args):
        raise AssertionError("simulated again")
    monkeypatch.setattr(runfacts, "_simulate", simulate_again)
    assert runfacts.prefetch(tmp_path, [(program, run) for run in dtr], REPORT_OVERHEAD_LIMIT, workers=2) == 0
    for run, want in zip(dtr, expected):  # kept under the key the consumers read, the same facts
        got = runfacts.facts(tmp_path, program, run, REPORT_OVERHEAD_LIMIT)
        assert got.capped == want.capped == (run.outcome == REMAT_LIMIT)
        assert got.counters == want.counters and got.deepest == want.deepest
        assert got.policy_evictions == want.policy_evictions and np.array_equal(got.head, want.head)
        assert all(np.array_equal(got.arrays[k], want.arrays[k]) for k in want.arrays)
