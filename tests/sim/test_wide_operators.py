"""Operators of any width and traces of any length on the compiled engine: it equals the Python engine
counter for counter past the 64 outputs it once kept on its stack, and a run that does fall back to
the Python engine says why (`--engine c` in one line)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import needs_compiled
from dtrlab.errors import UsageError
from dtrlab.sim.policies import NEIGHBORHOOD, POLICIES, register_policy
from dtrlab.sim.runtimes import RUNTIMES
from dtrlab.sim.simulate import budget_from_ratio, simulate
from dtrlab.trace.read import Alias, Call, Constant, Memory, Release
from helpers import compatible_cases, engines_observe_alike, program_of, synthetic_program

OLD_LIMIT = 64  # the outputs an operator could have on the compiled engine before


def wide_program(n_outputs: int):
    """One operator of `n_outputs` outputs, each then read by an operator of its own, under a budget
    that makes the wide one be evicted and recomputed."""
    ins = []

    def add(make, *fields):
        ins.append(make(len(ins) + 1, *fields))

    def call(name, args, results, time_ns, sizes):
        add(Call, name, args, results, time_ns)
        for result, size in zip(results, sizes):
            add(Memory, result, size)
            add(Alias, result, -1)

    add(Constant, "w")
    add(Memory, "w", 64)
    outs = tuple(f"o{i}" for i in range(n_outputs))
    call("wide", ("w",), outs, 5_000, [1000 + 8 * i for i in range(n_outputs)])
    for i, o in enumerate(outs):
        call("use", (o, "w"), (f"u{i}",), 100 + i, [4000])
    for i in range(n_outputs):
        call("use_backward", (f"u{i}", outs[(i * 7) % n_outputs]), (f"g{i}",), 50, [2000])
        add(Release, f"u{i}")
        add(Release, f"g{i}")
    for o in outs:
        add(Release, o)
    return program_of(ins, f"wide-{n_outputs}")


@needs_compiled
@pytest.mark.parametrize("n_outputs", [OLD_LIMIT, OLD_LIMIT + 1, 100, 300])
def test_wide_operators_run_compiled_and_both_engines_agree(n_outputs):
    program = wide_program(n_outputs)
    recomputed = 0
    for ratio in (0.3, 0.5, 0.8):
        budget = budget_from_ratio(program, ratio)
        auto = simulate(program, budget, "dtr")
        assert auto.engine == "c" and auto.engine_note == ""
        c = simulate(program, budget, "dtr", engine="c").to_dict()
        py = simulate(program, budget, "dtr", engine="python").to_dict()
        assert (c.pop("engine"), py.pop("engine")) == ("c", "python")
        assert c == py
        recomputed += c["remat_ns"] > 0
    assert recomputed >= 2  # the wide operator really is evicted and recomputed


# Hypothesis-generated programs whose calls have up to 200 outputs (the generator's own programs,
# with wider operators): every counter and every instrument alike on both engines.
wide_runs = st.tuples(
    st.integers(0, 10_000),  # program seed
    st.integers(3, 14),  # operators
    st.integers(OLD_LIMIT + 1, 200),  # most outputs a call may have
    st.sampled_from([c for c in compatible_cases() if not RUNTIMES[c[1]].banishing]),
    st.floats(0.05, 1.2),  # ratio
    st.integers(0, 3),  # policy seed
)


@pytest.mark.slow
@needs_compiled
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_runs)
def test_engines_agree_on_programs_with_operators_past_64_outputs(case):
    seed, n_ops, max_outputs, (policy, runtime), ratio, pseed = case
    program = synthetic_program(seed, n_ops, max_outputs=max_outputs)
    assume(int(program.op_n_out.max()) > OLD_LIMIT)
    engines_observe_alike(program, budget_from_ratio(program, ratio), policy, runtime, pseed)


@pytest.fixture
def python_policy():
    def score(f):
        den = f.size_bytes * f.staleness_ns
        return (f.compute_ns + f.neighborhood_ns) / den if den > 0 else float("inf")

    policy = register_policy("test-wide-fn", score, {NEIGHBORHOOD}, description="DTR as a Python function")
    yield policy
    del POLICIES[policy.name]


def test_a_fallback_says_which_engine_ran_and_why(python_policy):
    program = wide_program(8)
    budget = budget_from_ratio(program, 0.5)
    run = simulate(program, budget, python_policy)
    assert run.engine == "python" and "Python function" in run.engine_note
    banished = simulate(program, budget, "lru", "banishing")
    assert banished.engine == "python" and "banishing runtime" in banished.engine_note
    assert simulate(program, budget, "dtr", engine="python").engine_note == ""  # asked for
    with pytest.raises(UsageError, match="not available for this run: the banishing runtime"):
        simulate(program, budget, "lru", "banishing", engine="c")
