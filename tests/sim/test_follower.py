"""The compiled follower (`cengine.Follower`) against the Python engine following the same program
(`Engine.follow_program`): on generated programs, taken in random stretches with reads and forced
evictions between them, both tell their executor the same runs and drops in the same order, and
end with the same counters; with the program's own costs, those are `simulate`'s."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import needs_compiled
from dtrlab.sim import cengine
from dtrlab.sim.policies import get_policy
from dtrlab.sim.pyengine import Engine, OutOfMemory
from dtrlab.sim.runtimes import RUNTIMES, get_runtime
from dtrlab.sim.simulate import budget_from_ratio, simulate
from helpers import compatible_cases, synthetic_program

CASES = [(p, r) for p, r in compatible_cases()
         if not RUNTIMES[r].banishing and cengine.compiled_policy(get_policy(p))]


class _Executor:
    """Records what the engine asks; costs are the program's, or a fixed function of the run's
    number (a measured clock: a first run's cost replaces the program's)."""

    def __init__(self, costs: list[int], measured: bool) -> None:
        self.costs, self.measured = costs, measured
        self.log: list[tuple] = []

    def compute(self, op: int, tensors: list[int], remat: bool) -> int:
        self.log.append(("compute", op, tuple(tensors), remat))
        if self.measured:
            return (len(self.log) * 7919 % 997 + 1) * 1000
        return self.costs[op]

    def drop(self, storage: int, by_policy: bool) -> None:
        self.log.append(("drop", storage, by_policy))


def _follow(make, program, cuts: list[int], reads: list[float], measured: bool):
    """Take the schedule to each cut (then to its end); between stretches, read a made tensor, run
    an operator the program does not have on three made tensors, and evict the pool's first storage. Returns the executor's log and the final counters."""
    ex = _Executor(program.op_cost_ns.tolist(), measured)
    engine = make(ex)
    kinds, targets = program.step_kind.tolist(), program.step_target.tolist()
    outcome = "ok"
    try:
        for cut, read in zip(cuts + [len(kinds)], reads + [0.0]):
            engine.step_to(cut)
            made = [program.op_out_start[x] for k, x in zip(kinds[:cut], targets[:cut]) if k == 0]
            if made and read:
                engine.materialize(int(made[int(read * (len(made) - 1))]))
                args = [int(made[0]), int(made[int(read * (len(made) - 1))]), int(made[-1])]
                engine.prepare(args)  # an operator the program does not have, on these arguments
                engine.finish(args, None)
                pool = list(engine.pool)
                ex.log.append(("pool", tuple(pool)))
                if pool:
                    engine.evict(pool[0])
    except OutOfMemory:
        outcome = "oom"
    counters = (outcome, engine.clock, engine.memory, engine.peak, engine.remat_ns, engine.evictions,
                engine.eager_evictions)
    return ex.log, counters


follows = st.tuples(
    st.integers(0, 10_000),  # program seed
    st.sampled_from(CASES),
    st.floats(0.05, 1.2),  # ratio
    st.lists(st.floats(0, 1), max_size=6),  # where the stretches end, as fractions of the schedule
    st.lists(st.floats(0, 1), min_size=6, max_size=6),  # which made tensor each pause reads (0: none)
    st.booleans(),  # measured
)


@pytest.mark.slow
@needs_compiled
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(follows)
def test_the_compiled_follower_tells_what_the_python_engine_tells(case):
    seed, (policy, runtime), ratio, fractions, reads, measured = case
    program = synthetic_program(seed)
    budget = budget_from_ratio(program, ratio)
    pol, rt = get_policy(policy), get_runtime(runtime)
    n = len(program.step_kind)
    cuts = sorted(int(f * n) for f in fractions)
    reads = reads[:len(cuts)]

    def compiled(ex):
        return cengine.Follower(program, ex, budget, pol, rt, 0, fixed_costs=not measured)

    def python(ex):
        return Engine.follow_program(program, ex, budget, pol, rt, 0)

    c_log, c_counters = _follow(compiled, program, cuts, reads, measured)
    py_log, py_counters = _follow(python, program, cuts, reads, measured)
    assert c_log == py_log
    assert c_counters == py_counters


@needs_compiled
@pytest.mark.parametrize("policy, runtime", CASES[:6])
def test_followed_in_one_stretch_it_is_simulate(policy, runtime):
    """With the program's costs and nothing read or forced, following is simulating."""
    program = synthetic_program(7, n_ops=60)
    for ratio in (0.3, 0.6, 1.0):
        budget = budget_from_ratio(program, ratio)
        _, (outcome, clock, _, peak, remat_ns, evictions, eager) = _follow(
            lambda ex: cengine.Follower(program, ex, budget, get_policy(policy), get_runtime(runtime), 0, True),
            program, [], [], measured=False)
        sim = simulate(program, budget, policy, runtime, engine="c")
        assert (outcome, peak, evictions, eager) == (sim.outcome, sim.peak_bytes, sim.evictions, sim.eager_evictions)
        if outcome == "ok":
            assert (clock, remat_ns) == (sim.clock_ns, sim.remat_ns)


@needs_compiled
def test_the_follower_refuses_what_it_cannot_do():
    program = synthetic_program(3)
    ex = _Executor(program.op_cost_ns.tolist(), False)
    f = cengine.Follower(program, ex, math.inf, get_policy("dtr"), get_runtime("eager-optimized"), 0, True)
    f.step_to(len(program.step_kind))
    with pytest.raises(ValueError, match="is not evictable"):
        f.evict(max(range(program.n_storages), key=lambda s: s not in f.pool))
    with pytest.raises(ValueError, match="only the program's operators"):
        f.finish([], 0)
    with pytest.raises(IndexError, match="tensor .* is not in the program"):
        f.materialize(program.n_tensors)
