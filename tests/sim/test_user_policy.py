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


# --- policies written as formulas -----------------------------------------------------------------
ANTI_THRASH = "score: (compute + estar) / (size * staleness) * (1 + evictions) ** 2"


def _anti_thrash_function(f):  # the same score as a Python function over StorageFeatures
    den = f.size_bytes * f.staleness_ns
    return ((f.compute_ns + f.neighborhood_ns) / den if den > 0 else float("inf")) * (1 + f.evictions) ** 2


@pytest.fixture
def anti_thrash():
    formula = register_policy("test-anti-thrash", ANTI_THRASH, description="DTR, evicted storages penalised")
    function = register_policy("test-anti-thrash-fn", _anti_thrash_function, {NEIGHBORHOOD, "history"})
    yield formula, function
    del POLICIES[formula.name], POLICIES[function.name]


@pytest.mark.parametrize("seed", range(6))
def test_a_formula_runs_compiled_in_lockstep_with_the_same_python_function(anti_thrash, seed):
    formula, function = anti_thrash
    program = synthetic_program(seed, 80)
    for ratio in (0.3, 0.5, 0.8):
        budget = budget_from_ratio(program, ratio)
        runs = [simulate(program, budget, formula), simulate(program, budget, formula, engine="python"),
                simulate(program, budget, function)]
        assert [r.engine for r in runs] == ["c", "python", "python"]
        assert len({(r.outcome, r.clock_ns, r.evictions, r.eager_evictions, r.distinct_evicted, r.score_evals)
                    for r in runs}) == 1


@pytest.mark.slow
@needs_shared
def test_history_changes_the_choices_on_a_thrashing_trace(anti_thrash):
    formula, function = anti_thrash
    program = public_program("resnet32")
    budget = budget_from_ratio(program, 0.15)
    a, b = simulate(program, budget, formula), simulate(program, budget, "dtr")
    assert a.engine == "c" and (a.clock_ns, a.evictions) != (b.clock_ns, b.evictions)
    # The same choices from the score written by hand in Python, on the Python engine.
    c = simulate(program, budget, function)
    assert c.engine == "python"
    assert (c.outcome, c.clock_ns, c.evictions, c.eager_evictions, c.distinct_evicted) == \
        (a.outcome, a.clock_ns, a.evictions, a.eager_evictions, a.distinct_evicted)


def test_a_score_past_128_bits_takes_the_exact_python_path():
    program = synthetic_program(3, 80)
    budget = budget_from_ratio(program, 0.4)
    huge = "score: compute * size ** 4 * clock ** 4"  # far past 2**127 on these sizes and clocks
    with pytest.raises(UsageError, match="128 bits.*--engine python"):
        simulate(program, budget, huge, engine="c")
    fallback, exact = simulate(program, budget, huge), simulate(program, budget, huge, engine="python")
    assert fallback.engine == "python" and fallback == exact and exact.evictions > 0


@needs_shared
@pytest.mark.parametrize("executor", ["local", "dask"])
def test_inline_formulas_through_a_sweep(tmp_path, executor):
    from dtrlab.sweep.grid import build_specs
    from dtrlab.sweep.run import run_sweep
    from dtrlab.sweep.store import results_dataframe

    from conftest import TRACES

    program = public_program("resnet32")
    texts = ["score: (compute + estar) / (size * staleness)", "score: (compute + estar) / (size * staleness ** 2)"]
    specs = build_specs(str(TRACES), [program], texts, ["eager-optimized"], [0.2, 0.3])
    summary = run_sweep(specs, tmp_path / "results.duckdb", executor=executor, workers=2, progress=False)
    assert summary.ran == 4 and not summary.interrupted
    rows = results_dataframe(tmp_path / "results.duckdb")
    assert sorted(set(rows["policy"])) == sorted(texts)  # each formula keyed by its own text
    for _, row in rows.iterrows():
        direct = simulate(program, int(row["budget_bytes"]), row["policy"])
        assert (row["clock_ns"], row["evictions"]) == (direct.clock_ns, direct.evictions)


def test_a_registered_formula_sweeps_under_its_text_and_a_function_is_refused(tmp_path):
    """Worker processes know only built-ins and inline formulas: a formula registered here travels
    as its text (so its rows are its own); a Python function is one clear line, not a worker error."""
    from conftest import TRACES, require_shared
    from dtrlab.errors import UsageError
    from dtrlab.sweep.grid import build_specs
    from dtrlab.sweep.run import run_sweep
    from dtrlab.trace import load

    require_shared()
    program, = load(TRACES, ["resnet32"], cache=False)
    formula = register_policy("test-sweep-formula", "score: (compute + estar) / (size * staleness ** 2)",
                              replace=True)
    register_policy("test-sweep-function", lambda f: float(f.size_bytes), replace=True)
    specs = build_specs(str(TRACES), [program], ["test-sweep-formula"], ["eager-optimized"], [0.2, 0.3])
    assert {s.policy for s in specs} == {formula.formula.text}
    summary = run_sweep(specs, tmp_path / "r.duckdb", workers=2, progress=False)
    assert summary.ran == 2
    for s in specs:
        assert results_row(tmp_path / "r.duckdb", s.key)["clock_ns"] == \
            simulate(program, s.budget_bytes, "test-sweep-formula").clock_ns
    functions = build_specs(str(TRACES), [program], ["test-sweep-function"], ["eager-optimized"], [0.2])
    with pytest.raises(UsageError, match="is a Python function registered in this process, which a sweep's worker processes cannot see"):
        run_sweep(functions, tmp_path / "f.duckdb", workers=1, progress=False)
    assert not (tmp_path / "f.duckdb").exists()


def results_row(path, key):
    from dtrlab.sweep.store import results_dataframe

    return results_dataframe(path).set_index("key").loc[key]
