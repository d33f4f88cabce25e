"""Engine properties on hypothesis-generated programs: budgets hold, engines agree, runs repeat."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dtrlab.sim.runtimes import RUNTIMES
from conftest import needs_compiled, require_compiled
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate
from dtrlab.errors import UsageError
from dtrlab.trace import load, shipped_traces
from helpers import (assert_same_observations, compatible_cases, engines_observe_alike, every_instrument,
                     synthetic_program)

V2_RUNTIMES = [r for r in RUNTIMES.values() if not r.banishing]


CASES = compatible_cases()

runs = st.tuples(
    st.integers(0, 10_000),  # program seed
    st.sampled_from(CASES),
    st.floats(0.05, 1.2),  # ratio
    st.integers(0, 3),  # policy seed
)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _setup(case):
    """(program, budget, policy, runtime, policy seed) of one generated case."""
    seed, (policy, runtime), ratio, pseed = case
    program = synthetic_program(seed)
    return program, budget_from_ratio(program, ratio), policy, runtime, pseed


@pytest.mark.slow
@SETTINGS
@given(runs)
def test_memory_never_exceeds_the_budget(case):
    program, budget, policy, runtime, pseed = _setup(case)
    result = simulate(program, budget, policy, runtime, seed=pseed)
    assert result.peak_bytes <= budget
    assert result.outcome in ("ok", "oom")


def _assert_engines_agree(program, budget, policy, runtime, pseed=0):
    a = simulate(program, budget, policy, runtime, seed=pseed, engine="python").to_dict()
    b = simulate(program, budget, policy, runtime, seed=pseed, engine="c").to_dict()
    assert a.pop("engine") == "python" and b.pop("engine") == "c"
    assert a == b
    # and every instrument: counts, memory series, the event log row for row, the OOM snapshot
    engines_observe_alike(program, budget, policy, runtime, pseed)


@pytest.mark.slow
@needs_compiled
@SETTINGS
@given(runs)
@example((931, ("ab-eq-size", "eager-optimized"), 0.3125, 0))  # see the test below
def test_compiled_and_python_engines_agree(case):
    program, budget, policy, runtime, pseed = _setup(case)
    if RUNTIMES[runtime].banishing:
        return  # the banishing runtime runs on the Python engine only
    _assert_engines_agree(program, budget, policy, runtime, pseed)


# Programs on which the compiled engine once parted from the Python one: a storage whose
# operator is created but not yet computed had no equivalence-class node there, so a
# neighbour evicted to make room for it did not merge with it, and its first computation
# took nothing off that class (the reference's node of value 0 does both).
@needs_compiled
@pytest.mark.parametrize("seed, n_ops, ratio, policy", [
    (1, 8, 0.6, "ab-eq-size"), (213, 12, 0.5, "ab-eq-size"), (125, 16, 0.6, "ab-eq-size"),
    (931, 40, 0.3125, "ab-eq-size"), (1, 8, 0.6, "ab-eq"), (268, 12, 0.6, "ab-eq"), (269, 16, 0.3, "ab-eq"),
])
def test_engines_agree_where_an_unmade_storage_joins_an_equivalence_class(seed, n_ops, ratio, policy):
    program = synthetic_program(seed, n_ops)
    _assert_engines_agree(program, budget_from_ratio(program, ratio), policy, "eager-optimized")


@needs_compiled
@pytest.mark.parametrize("policy", ["dtr-eq", "ab-eq-stale"])
def test_engines_agree_on_the_tiny_example_with_equivalence_classes(policy):
    """The same on a shipped trace: at 0.6 the compiled engine evicted one storage fewer."""
    (program,) = load(Path(shipped_traces()).parent / "examples" / "tiny.jsonl", cache=False)
    _assert_engines_agree(program, budget_from_ratio(program, 0.6), policy, "eager-optimized")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(CASES))
def test_unbounded_budget_evicts_nothing(seed, case):
    policy, runtime = case
    program = synthetic_program(seed)
    result = simulate(program, None, policy, runtime)
    assert result.outcome == "ok"
    assert result.evictions == 0 and result.remat_ns == 0
    # The reference clock starts at 1: an unconstrained run ends one tick past its compute.
    assert result.clock_ns == program.compute_ns + 1 == baseline(program).compute_ns + 1
    assert result.overhead == (program.compute_ns + 1) / program.compute_ns


@settings(max_examples=40, deadline=None)
@given(runs)
def test_same_inputs_same_result(case):
    program, budget, policy, runtime, pseed = _setup(case)
    first = simulate(program, budget, policy, runtime, seed=pseed)
    again = simulate(synthetic_program(case[0]), budget, policy, runtime, seed=pseed)
    assert first == again


@pytest.mark.slow
def test_results_do_not_depend_on_hash_order(tmp_path):
    """Python's hash seed reorders dicts of strings and sets of objects; results must not move."""
    script = (
        "import json, sys; sys.path.insert(0, 'tests/sim');"
        "from helpers import synthetic_program;"
        "from dtrlab.sim.simulate import simulate, baseline;"
        "out = []\n"
        "for seed in range(6):\n"
        "    p = synthetic_program(seed, 60)\n"
        "    b = int(baseline(p).peak_bytes * 0.4)\n"
        "    for pol in ('dtr', 'dtr-eq', 'dtr-unopt', 'msps'):\n"
        "        out.append(simulate(p, b, pol, engine='python').to_dict())\n"
        "print(json.dumps(out))"
    )
    outputs = set()
    for hash_seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        outputs.add(done.stdout)
    assert len(outputs) == 1
    assert len(json.loads(outputs.pop())) == 24


@pytest.mark.slow
def test_deep_rematerialization_chain_needs_no_recursion():
    """A 20,000-operator chain, all evicted, then its last link used: every link is recomputed
    in one rematerialization chain, under the default recursion limit."""
    from dtrlab.trace.read import Alias, Call, Constant, Memory, Release
    from helpers import program_of

    n = 20_000
    ins = [Constant(1, "c"), Memory(2, "c", 8)]

    def call(name, args, out, size):
        line = len(ins) + 1
        ins.extend([Call(line, name, args, (out,), 10), Memory(line + 1, out, size), Alias(line + 2, out, -1)])

    call("f", ("c",), "x0", 100)
    for i in range(1, n):
        call("f", (f"x{i - 1}",), f"x{i}", 100)
        ins.append(Release(len(ins) + 1, f"x{i - 1}"))  # the lazy runtime keeps it recomputable
    call("h", ("c",), "z", 392)  # fills the budget: every link gets evicted
    call("g", (f"x{n - 1}",), "y", 100)
    ins.extend(Release(len(ins) + 1 + k, name) for k, name in enumerate((f"x{n - 1}", "z", "y")))
    program = program_of(ins, "chain")
    assert sys.getrecursionlimit() <= 10_000
    require_compiled()
    for engine in ("c", "python"):
        result = simulate(program, 400, "lru", "lazy", engine=engine)
        assert result.outcome == "ok"
        assert result.remat_ns >= 10 * n  # the whole chain was recomputed once
        assert result.evictions > 2 * n - 10


# --- random formulas: the two engines agree on every counter --------------------------------------
from dtrlab.sim import formula as fm  # noqa: E402
from dtrlab.sim.policies import formula_policy  # noqa: E402
from formula_strategies import CHEAP_FEATURES, formula_nodes  # noqa: E402

formula_runs = st.tuples(
    st.integers(0, 10_000),  # program seed
    st.sampled_from([r.name for r in V2_RUNTIMES]),
    st.floats(0.05, 1.2),  # ratio
    st.data(),
)


@pytest.mark.slow
@needs_compiled
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(formula_runs)
def test_compiled_and_python_engines_agree_on_random_formulas(case):
    seed, runtime, ratio, data = case
    features = tuple(fm.FEATURES) if RUNTIMES[runtime].optimized else CHEAP_FEATURES
    policy = formula_policy(data.draw(formula_nodes(features, max_leaves=8)))
    program = synthetic_program(seed)
    budget = budget_from_ratio(program, ratio)
    ins = every_instrument()
    ra = simulate(program, budget, policy, runtime, engine="python", instruments=ins)
    try:
        rb = simulate(program, budget, policy, runtime, engine="c", instruments=ins)
    except UsageError as exc:  # a score past 128-bit integers: the default takes the exact path
        assert "128 bits" in str(exc)
        rb = simulate(program, budget, policy, runtime, instruments=ins)
        assert rb.engine == "python"
    a, b = ra.to_dict(), rb.to_dict()
    a.pop("engine"), b.pop("engine")
    assert a == b, policy.name
    assert_same_observations(ra.observations, rb.observations)
