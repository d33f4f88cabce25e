"""The solver as a sweepable policy (`--policy optimal`): one solve a (trace, budget) on the local pool,
its row in the store (the checker's overhead, the bound, the gap, the status, the time limit) against
brute force, resumed without solving again, keyed by its settings; and stores of the first schema open."""

from __future__ import annotations

import math

import duckdb
import pytest

from brute import brute_force_optimum
from conftest import cli_invoke
from dtrlab.errors import UsageError
from dtrlab.optimal.defaults import OPTIMAL_POLICY, SolveSettings
from dtrlab.optimal.solve import INFEASIBLE, OPTIMAL, min_budget_bytes, overhead_of
from dtrlab.sim.policies import POLICIES, SOLVER_NAME
from dtrlab.sim.simulate import baseline
from dtrlab.sweep.grid import CHECKER_RUNTIME, build_specs
from dtrlab.sweep.run import run_sweep
from dtrlab.sweep.store import SCHEMA_VERSION, Store, results_dataframe
from dtrlab.trace import load
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import write_trace

SETTINGS = SolveSettings(time_limit_s=10)


def _small_trace(folder, seed=3, n_ops=6):
    """A generated trace small enough for brute force, written where worker processes can read it."""
    path = folder / f"small{seed}.jsonl"
    write_trace(synthetic_trace(seed, n_ops, max_args=2, max_outputs=2, size_bytes=(4, 64), time_ns=(1, 100)), path)
    (program,) = load(str(path), cache=False)
    return str(path), program


def _budgets(program):
    """Below the least budget (no schedule), at it, and between it and the peak."""
    low = min_budget_bytes(program)
    peak = max(baseline(program).peak_bytes, low)
    return sorted({low - 1, low, (low + peak) // 2, peak})


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("optsweep")
    source, program = _small_trace(folder)
    specs = build_specs(source, [program], [OPTIMAL_POLICY, "dtr"], ["eager-optimized"],
                        budgets_bytes=_budgets(program), solve=SETTINGS)
    store = folder / "s.duckdb"
    first = run_sweep(specs, store, workers=2, progress=False)
    return program, specs, store, first


def test_each_budget_is_one_solve_whose_row_is_the_brute_force_optimum(swept):
    program, specs, store, first = swept
    solves = [s for s in specs if s.policy == OPTIMAL_POLICY]
    assert len(solves) == len(_budgets(program)) and first.ran == len(specs)
    frame = results_dataframe(store).set_index("key")
    for spec in solves:
        row = frame.loc[spec.key]
        assert row["runtime"] == CHECKER_RUNTIME and row["time_limit_s"] == SETTINGS.time_limit_s
        assert row["target_gap"] == SETTINGS.gap and row["solver"] == SETTINGS.solver and row["solve_kind"] == "exact"
        best = brute_force_optimum(program, spec.budget_bytes)
        if best is None:  # no schedule at all: proven so, and the row says it
            assert row["outcome"] == "oom" and math.isnan(row["overhead"])
            # infeasible: no schedule of the stage model fits (the bound is inf when the relaxation proves none)
            assert row["solver_status"] == INFEASIBLE and row["bound_overhead"] >= 1.0
            continue
        truth = overhead_of(program, best)
        assert row["outcome"] == "ok" and row["overhead"] == pytest.approx(truth, rel=1e-12)
        assert row["bound_overhead"] <= row["overhead"] + 1e-12 and row["bound_overhead"] <= truth + 1e-12
        assert row["gap"] == pytest.approx(max(0.0, (row["overhead"] - row["bound_overhead"]) / row["overhead"]))
        assert row["solver_status"] in (OPTIMAL, "feasible")
        if row["solver_status"] == OPTIMAL:
            assert row["gap"] <= SETTINGS.gap * program.compute_ns / (program.compute_ns + 1 + best) + 1e-12
    # DTR's rows beside them are simulations: no solver columns
    dtr = frame[frame["policy"] == "dtr"]
    assert len(dtr) == len(_budgets(program)) and dtr["solver_status"].isna().all() and dtr["bound_overhead"].isna().all()


def test_a_second_sweep_solves_nothing(swept):
    program, specs, store, _ = swept
    before = results_dataframe(store)
    again = run_sweep(specs, store, workers=2, progress=False)
    assert (again.ran, again.skipped, again.total) == (0, len(specs), len(specs))
    after = results_dataframe(store)
    assert list(after["created_at"]) == list(before["created_at"])  # no row written again


def test_the_key_holds_what_decides_a_solve(tmp_path):
    source, program = _small_trace(tmp_path)
    budget = [min_budget_bytes(program)]

    def key(settings):
        (spec,) = build_specs(source, [program], [OPTIMAL_POLICY], ["eager-optimized"], budgets_bytes=budget,
                              solve=settings)
        return spec.key

    base = key(SolveSettings(time_limit_s=10))
    assert key(SolveSettings(time_limit_s=10.0)) == base  # the same settings, however spelt
    others = [SolveSettings(time_limit_s=20), SolveSettings(time_limit_s=10, solver="cpsat"),
              SolveSettings(time_limit_s=10, gap=0.01), SolveSettings(time_limit_s=10, bound_only=True)]
    assert len({base, *map(key, others)}) == 5
    # one solve a budget whatever the runtimes, and never a simulation's key
    specs = build_specs(source, [program], [OPTIMAL_POLICY, "dtr"], ["eager-optimized", "optimized"],
                        budgets_bytes=budget, solve=SolveSettings(time_limit_s=10))
    assert sorted(s.policy for s in specs) == ["dtr", "dtr", OPTIMAL_POLICY]
    assert OPTIMAL_POLICY not in POLICIES and OPTIMAL_POLICY == SOLVER_NAME  # no eviction policy takes its name


def test_asking_a_simulation_for_the_solver_says_where_it_is():
    done = cli_invoke("simulate", "--ratio", "0.5", "--policy", "optimal")
    assert done.exit_code == 2 and "is the optimal solver, not an eviction policy" in done.output and "dtrlab sweep --policy optimal" in done.output


def test_bad_settings_are_one_line():
    for bad in (dict(time_limit_s=0), dict(time_limit_s=math.inf), dict(gap=1.0), dict(solver="gurobi")):
        with pytest.raises(UsageError) as info:
            SolveSettings(**bad)
        assert "\n" not in str(info.value)


def test_bound_only_rows_hold_the_crossing_bound_below_the_optimum_and_the_portfolio_s_best_above(tmp_path):
    source, program = _small_trace(tmp_path, seed=5)
    budgets = _budgets(program)[1:]
    specs = build_specs(source, [program], [OPTIMAL_POLICY], [], budgets_bytes=budgets,
                        solve=SolveSettings(time_limit_s=5, bound_only=True))
    run_sweep(specs, tmp_path / "b.duckdb", workers=1, progress=False)
    frame = results_dataframe(tmp_path / "b.duckdb").set_index("budget_bytes")
    for budget in budgets:
        row = frame.loc[budget]
        optimum = overhead_of(program, brute_force_optimum(program, budget))
        assert row["solve_kind"] == "crossing-bound" and 1.0 <= row["bound_overhead"] <= optimum + 1e-12
        # the best of the portfolio's runs: a schedule, so never below the optimum
        assert row["outcome"] == "ok" and optimum - 1e-12 <= row["overhead"]
        assert row["solver"].startswith("portfolio:")


@pytest.mark.slow
def test_the_sweep_command_takes_the_solver_among_its_policies(tmp_path):
    source, program = _small_trace(tmp_path)
    budget = str(min_budget_bytes(program))
    store = tmp_path / "c.duckdb"
    args = ["sweep", source, "--budget-bytes", budget, "--policy", "optimal", "--time-limit", "7",
            "--store", store, "--workers", "1"]
    done = cli_invoke(*args)
    assert done.exit_code == 0, done.output
    frame = results_dataframe(store)
    assert list(frame["policy"]) == [OPTIMAL_POLICY] and list(frame["time_limit_s"]) == [7.0]
    assert "0 run now, 1 already stored" in cli_invoke(*args).output
    longer = cli_invoke(*[("8" if a == "7" else a) for a in args])  # another time limit: another solve
    assert "1 run now, 0 already stored" in longer.output and len(results_dataframe(store)) == 2
    bad = cli_invoke("sweep", source, "--budget-bytes", budget, "--policy", "optimal", "--gap", "2", "--store", store)
    assert bad.exit_code == 2 and "--gap must be in [0, 1)" in bad.output


# The runs table as dtrlab wrote it under store schema 1 (before the solver's columns).
SCHEMA_1 = """
CREATE TABLE meta (app VARCHAR NOT NULL, schema_version INTEGER NOT NULL, created_by VARCHAR NOT NULL,
                   created_at TIMESTAMPTZ NOT NULL);
CREATE TABLE runs (key VARCHAR PRIMARY KEY, trace VARCHAR NOT NULL, trace_sha256 VARCHAR NOT NULL,
    policy VARCHAR NOT NULL, runtime VARCHAR NOT NULL, ratio DOUBLE, budget_bytes BIGINT NOT NULL,
    outcome VARCHAR NOT NULL, overhead DOUBLE, clock_ns BIGINT, remat_ns BIGINT, evictions BIGINT,
    eager_evictions BIGINT, distinct_evicted BIGINT, peak_bytes BIGINT, score_evals BIGINT,
    baseline_compute_ns BIGINT, baseline_peak_bytes BIGINT, overhead_limit DOUBLE, seed BIGINT NOT NULL,
    engine VARCHAR, timeout_s DOUBLE, wall_s DOUBLE NOT NULL, created_at TIMESTAMPTZ NOT NULL,
    dtrlab_version VARCHAR NOT NULL);
CREATE TABLE storage_evictions (key VARCHAR NOT NULL, storage BIGINT NOT NULL, heuristic_evictions BIGINT NOT NULL,
    eager_evictions BIGINT NOT NULL, rematerializations BIGINT NOT NULL, PRIMARY KEY (key, storage));
INSERT INTO meta VALUES ('dtrlab-results', 1, '0.1.0', now());
INSERT INTO runs VALUES ('k1', 'tiny', 'abc', 'dtr', 'eager-optimized', 0.5, 1000, 'ok', 1.5, 150, 50, 3, 1, 2, 900,
    10, 100, 2000, NULL, 0, 'c', NULL, 0.01, now(), '0.1.0');
"""


def test_a_store_of_the_first_schema_opens_and_is_brought_forward_for_writing(tmp_path):
    path = tmp_path / "v1.duckdb"
    con = duckdb.connect(str(path))
    con.execute(SCHEMA_1)
    con.close()
    data = path.read_bytes()
    with Store(path, read_only=True) as store:  # read as it is: the new columns NULL, nothing written
        frame = store.rows()
        assert store.version == 1 and list(frame["key"]) == ["k1"] and frame["overhead"][0] == 1.5
        assert frame["bound_overhead"].isna().all() and frame["solver_status"].isna().all()
    assert path.read_bytes() == data
    source, program = _small_trace(tmp_path)
    specs = build_specs(source, [program], [OPTIMAL_POLICY], [], budgets_bytes=[min_budget_bytes(program)],
                        solve=SETTINGS)
    summary = run_sweep(specs, path, workers=1, progress=False)  # a writable open migrates, then stores
    assert summary.ran == 1
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT schema_version FROM meta").fetchall() == [(SCHEMA_VERSION,)]
    rows = con.execute("SELECT key, outcome, clock_ns, bound_overhead FROM runs ORDER BY key").fetchall()
    con.close()
    assert rows[1] == ("k1", "ok", 150, None) and rows[0][0] == specs[0].key and rows[0][3] is not None


@pytest.mark.slow
def test_dask_gives_the_local_pools_row(tmp_path, swept):
    program, specs, store, _ = swept
    solves = [s for s in specs if s.policy == OPTIMAL_POLICY]
    run_sweep(solves, tmp_path / "d.duckdb", executor="dask", workers=1, progress=False)
    local = results_dataframe(store).set_index("key")
    dask = results_dataframe(tmp_path / "d.duckdb").set_index("key")
    assert sorted(dask.index) == sorted(s.key for s in solves)
    columns = ["outcome", "clock_ns", "remat_ns", "peak_bytes", "solver_status", "solve_kind", "time_limit_s"]
    assert dask[columns].astype(object).equals(local.loc[dask.index, columns].astype(object))


def test_refinement_puts_solves_of_the_same_settings_between_budgets_whose_outcomes_differ(tmp_path):
    from pathlib import Path

    from dtrlab.optimal.solve import solve
    from dtrlab.sweep.run import refine_specs

    tiny = Path(__file__).resolve().parents[2] / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"
    (program,) = load(str(tiny), cache=False)
    settings = SolveSettings(time_limit_s=5)
    specs = build_specs(str(tiny), [program], [OPTIMAL_POLICY], [], [0.5, 1.0], solve=settings)
    with Store(tmp_path / "r.duckdb") as store:
        for spec in specs:  # solved here, in this process: the store's rows are what refinement reads
            store.put(spec, solve(program, spec.budget_bytes, spec.solve), wall_s=0.0)
        outcomes = set(store.rows()["outcome"])
        assert outcomes == {"ok", "oom"}, outcomes  # tiny: no schedule at 0.5, one at 1.0
        new = refine_specs(specs, store, {program.sha256: program}, 1, 1.05)
    assert [s.ratio for s in new] == [0.75]
    assert new[0].policy == OPTIMAL_POLICY and new[0].solve == settings and new[0].key not in {s.key for s in specs}
