"""The chain schedule (optimal/chain.py): its plan is the dynamic program's, its schedules replay within
their budgets and never beat brute force, and it answers where every portfolio policy fails."""

from __future__ import annotations

import pytest

from brute import brute_force_optimum, rnn_program
from conftest import needs_shared, public_program
from dtrlab.optimal.chain import _again, _first, best_chain_schedule, chain_of, reversal_plan
from dtrlab.optimal.defaults import CHAIN_MAKER, SolveSettings
from dtrlab.optimal.solve import min_budget_bytes, solve
from dtrlab.schedule.check import check_schedule
from dtrlab.sim.simulate import budget_from_ratio


def _walked_cost(held: tuple[tuple[int, ...], ...]) -> int:
    """The stage forwards a plan costs, counted from its held sets alone: the backward visits stages
    last first; stage j's activations are remade from the nearest state held before it (or the start),
    advancing over the stages between (the states it newly holds are made on the way); the first
    forward, up to the last stage, is free."""
    made: set[int] = set()
    cost = 0
    for j in range(len(held) - 1, -1, -1):
        if j < len(held) - 1:
            cost += j + 1 - max((k for k in held[j] if k in made), default=0)
        made = set(held[j])  # what is held now; a state let go is gone
    return cost


@pytest.mark.parametrize("stages", [1, 2, 3, 5, 8, 13, 30])
@pytest.mark.parametrize("slots", [0, 1, 2, 3, 6])
def test_the_plan_costs_what_the_dynamic_program_says(stages, slots):
    held = reversal_plan(stages, slots)
    assert len(held) == stages
    assert all(len(h) <= slots and all(0 < k <= j for k in h) for j, h in enumerate(held))
    assert _walked_cost(held) == _first(stages, slots)[0]


@pytest.mark.parametrize("length", range(1, 12))
def test_the_dynamic_program_s_closed_forms(length):
    # no slot: every stage is reached again from the start; slots enough: each stage is made once more
    assert _first(length, 0)[0] == length * (length - 1) // 2
    assert _again(length, 0)[0] == length * (length + 1) // 2
    assert _first(length, length)[0] == length - 1
    assert _again(length, length)[0] == 2 * length - 1
    costs = [_first(length, s)[0] for s in range(length + 1)]
    assert costs == sorted(costs, reverse=True)  # a slot more never costs more


@pytest.mark.slow
def test_a_chain_schedule_replays_within_its_budget_and_never_beats_brute_force():
    made = 0
    for seed in range(12):
        program = rnn_program(seed, cells=3)
        low, high = min_budget_bytes(program), budget_from_ratio(program, 1.0)
        for budget in (low + (high - low) // 4, (low + high) // 2):
            got = best_chain_schedule(program, budget, remat_limit_ns=50 * program.compute_ns)
            if got is None:
                continue
            made += 1
            replay = check_schedule(program, got.schedule, budget)
            assert replay.peak_bytes <= budget and replay.remat_ns == got.remat_ns
            assert replay.remat_ns >= brute_force_optimum(program, budget), (seed, budget)
    assert made >= 12  # most of these small recurrences are chains


@pytest.mark.slow
def test_the_shipped_lstm_is_cut_where_the_least_bytes_cross():
    """The cut rule, counted naively: between each two forward operators, the storages made before and
    read by a forward operator after; cuts where those bytes are at most the least over the middle half
    of the forward, one per run of such positions."""
    from dtrlab.trace import load, shipped_traces

    program = next(p for p in load(shipped_traces()) if p.name == "lstm")
    chain = chain_of(program)
    fwd = [o for o in range(program.n_ops) if not program.op_backward[o] and not program.op_constant[o]]
    maker = program.tensor_op[program.storage_root]
    reads = [{int(program.tensor_storage[a]) for a in program.args_of(o)} for o in fwd]
    made = [{int(program.tensor_storage[u]) for u in range(program.op_out_start[o],
                                                          program.op_out_start[o] + program.op_n_out[o])}
            for o in fwd]
    crossing = [frozenset(s for s in set().union(*made[:k]) & set().union(*reads[k:]) if maker[s] in fwd)
                for k in range(len(fwd) + 1)]
    size = [int(program.storage_size_bytes[list(c)].sum()) for c in crossing]
    n = len(fwd)
    least = min(size[n // 4:3 * n // 4])
    cuts = [k for k in range(1, n) if size[k] <= least and (k == 1 or size[k - 1] > least)]
    assert chain is not None and chain.n_stages == len(cuts) + 1 >= 8
    assert [frozenset(state) for state in chain.state[1:]] == [crossing[k] for k in cuts]


@pytest.mark.slow
@needs_shared
def test_the_lstm_at_a_tenth_gets_a_schedule_where_every_policy_fails():
    program = public_program("lstm")
    budget = budget_from_ratio(program, "0.1")
    result = solve(program, budget, SolveSettings(bound_only=True))
    assert result.solver == f"portfolio:{CHAIN_MAKER}" and result.dtr_overhead is None
    assert result.replay.peak_bytes <= budget
    assert result.bound_overhead <= result.overhead < 20
