"""The chain schedule (optimal/chain.py): its plans are the dynamic programs' (Griewank's, and the
rotor plan's of optimal/rotor.py, against a count from the plan alone and against every plan of its
kind), its schedules replay within their budgets and never beat brute force, and it answers where every
portfolio policy fails."""

from __future__ import annotations

import math
import random

import pytest

from brute import brute_force_optimum, rnn_program
from conftest import needs_shared, public_program
from dtrlab.optimal.chain import (_again, _Facts, _first, best_chain_schedule, chain_costs, chain_of, reversal_plan,
                                  rotor_plans, rotor_schedule)
from dtrlab.optimal.defaults import CHAIN_MAKER, SolveSettings
from dtrlab.optimal.rotor import ChainCosts, Keep, RotorTable
from dtrlab.optimal.solve import min_budget_bytes, solve
from dtrlab.schedule.check import check_schedule
from dtrlab.sim.simulate import budget_from_ratio


# Of the 18 chain schedules of the small recurrences, those that meet the brute-force optimum (8 before
# the rotor plan).
MET_OPTIMUM = 13


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


def _chain_costs(seed: int, n_stages: int, most_bytes: int) -> ChainCosts:
    """A generated chain: stage costs and sizes drawn from `seed`; stage 0's state is the start (0). Each
    stage offers its activations and up to two partial keeps, smaller and remade at a cost."""
    rng = random.Random(seed)
    forward = [rng.randint(1, 1000) for _ in range(n_stages)]
    state = [0] + [rng.randint(1, most_bytes) for _ in range(n_stages - 1)]
    activations = [rng.randint(0, 2 * most_bytes) for _ in range(n_stages)]
    keeps = []
    for j in range(n_stages):
        after = state[j + 1] if j + 1 < n_stages else 0
        offered = [Keep(activations[j], 0, rng.randint(0, min(activations[j], after)), activations[j])]
        for _ in range(rng.randint(0, 2) if activations[j] > 1 else 0):
            held = rng.randint(1, activations[j] - 1)
            offered.append(Keep(held, rng.randint(0, forward[j]), rng.randint(0, min(held, after)),
                                rng.randint(activations[j], activations[j] + held)))
        keeps.append(tuple(offered))
    return ChainCosts(tuple(forward), tuple(state), tuple(activations), tuple(keeps))


def _walked_rotor(costs: ChainCosts, states, kept) -> tuple[int, int]:
    """(cost ns, most bytes held at once) of a plan, counted from its held sets alone: the backward
    visits stages last first; before stage j's backward, every state and keep newly held, and stage j
    itself unless kept, is made by running forward from the nearest state held at the step before (or
    the start), a stage at most once a step; a keep of stage j is then remade at its remake_ns. Held
    then: the states, the keeps (less what a keep shares with the next state when both are held) and
    stage j's activations, or its keep and activations together."""
    f, x, a = costs.forward_ns, costs.state_bytes, costs.activation_bytes
    before_states: set[int] = set()
    before_kept: set[tuple[int, int]] = set()
    total = most = 0
    for j in range(costs.n_stages - 1, -1, -1):
        held, keeping = set(states[j]), set(kept[j])
        have = (before_states & held) | {0}
        ends = [(k, k) for k in held - have] + [(k, k + 1) for k, _ in keeping - before_kept]
        mine = [costs.keeps[j][i] for k, i in keeping if k == j]
        if not mine:
            ends.append((j, j + 1))
        ran: set[int] = set()
        for k, end in ends:
            ran |= set(range(max(h for h in have if h <= k), end))
        total += sum(f[i] for i in ran) + sum(keep.remake_ns for keep in mine)
        others = [costs.keeps[k][i] for k, i in keeping if k != j]
        held_bytes = (sum(x[k] for k in held) + sum(keep.held_bytes for keep in others)
                      - sum(costs.keeps[k][i].shared_bytes for k, i in keeping if k != j and k + 1 in held)
                      + (mine[0].backward_bytes if mine else a[j]))
        most = max(most, held_bytes)
        before_states, before_kept = held, keeping
    return total, most


def _every_rotor_plan(costs: ChainCosts, s: int, t: int, held: tuple, kept: tuple):
    """Every plan of the rotor kind for stages s..t (s's state held), each as a list of (stage, states
    held, keeps held) for the stages' backwards: every choice sequence, with no table and no memory."""
    if s == t:
        yield [(s, held, kept)]
        return
    for i in range(len(costs.keeps[s])):  # forward-all, keep i
        mine = kept + ((s, i),)
        for later in _every_rotor_plan(costs, s + 1, t, held + (s + 1,), mine):
            yield later + [(s, held, mine)]
    for cut in range(s + 1, t + 1):  # checkpoint at cut
        for later in _every_rotor_plan(costs, cut, t, held + (cut,), kept):
            for earlier in _every_rotor_plan(costs, s, cut - 1, held, kept):
                yield later + earlier


def _brute_rotor_ns(costs: ChainCosts, memory_bytes: int) -> float:
    """The least cost of any rotor plan that holds at most memory_bytes at once (walked, not tabled)."""
    best = math.inf
    for steps in _every_rotor_plan(costs, 0, costs.n_stages - 1, (), ()):
        states, kept = [()] * costs.n_stages, [()] * costs.n_stages
        for j, held, keeping in steps:
            states[j], kept[j] = held, keeping
        total, most = _walked_rotor(costs, states, kept)
        if most <= memory_bytes:
            best = min(best, total)
    return best


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("stages", [1, 2, 5, 13, 40])
def test_the_rotor_plan_costs_what_its_dynamic_program_says(seed, stages):
    """On generated chains, the plan's cost counted from its held sets is the table's, it never holds
    more than its memory, and every stage runs once at least."""
    costs = _chain_costs(seed, stages, most_bytes=1000)
    top = 3 * 1000 * stages
    table = RotorTable(costs, top, levels=200)  # a unit of 15 x stages bytes: every size is rounded
    for memory in (top, top // 2, top // 5, top // 10):
        plan = table.plan(memory)
        if plan is None:
            assert table.forward_ns(memory) == math.inf
            continue
        walked, most = _walked_rotor(costs, plan.states, plan.kept)
        assert walked == plan.forward_ns == table.forward_ns(memory)
        assert most <= memory
        assert all(0 < k <= j for j, h in enumerate(plan.states) for k in h)
        assert all(k <= j and 0 <= i < len(costs.keeps[k]) for j, h in enumerate(plan.kept) for k, i in h)
        assert walked >= sum(costs.forward_ns)


@pytest.mark.parametrize("seed", range(10))
def test_the_rotor_dynamic_program_is_the_best_of_every_plan_of_its_kind(seed):
    """On small chains, at memories from tight to ample, the table's least cost is the least over every
    choice sequence (each plan walked and its memory counted apart), with exact sizes (a unit of 1)."""
    stages = 3 + seed % 3
    costs = _chain_costs(seed, stages, most_bytes=6)
    for memory in (4, 8, 12, 16, 20, 30, 40):
        table = RotorTable(costs, memory, levels=500)
        assert table.unit_bytes == 1
        assert table.forward_ns(memory) == _brute_rotor_ns(costs, memory), (stages, memory)


def test_the_rotor_plan_keeps_activations_where_memory_allows():
    """Ample memory: every stage's activations are kept from the first forward, nothing runs again.
    Room for one state and one stage's activations only: each stage is made again from the start, its
    own state held; less than that (the last stage's state and activations): no plan. A partial keep
    is taken where the activations do not fit and running the stage again costs more than remaking."""
    def chain(partial: tuple[Keep, ...]) -> ChainCosts:
        return ChainCosts((5, 7, 11, 13), (0, 2, 3, 4), (6, 6, 6, 6),
                          ((Keep(6, 0, 1, 6), *partial), (Keep(6, 0, 1, 6),), (Keep(6, 0, 1, 6),), (Keep(6, 0, 0, 6),)))

    costs = chain(())
    plan = RotorTable(costs, 10_000).plan(10_000)
    assert plan.forward_ns == 36 and plan.kept[3] == ((0, 0), (1, 0), (2, 0))
    tight = RotorTable(costs, 10).plan(10)
    assert tight.kept == ((), (), (), ()) and tight.states == ((), (1,), (2,), (3,))
    assert tight.forward_ns == 36 + (5 + 7 + 11) + (5 + 7) + 5
    assert RotorTable(costs, 9).plan(9) is None
    # two stages: stage 0 (10 ns) keeps its 8 bytes of activations, or 2 bytes remade into them at 3 ns
    # (9 bytes together); stage 1's state and activations take 1 byte each
    two = ChainCosts((10, 1), (0, 1), (8, 1), ((Keep(8, 0, 0, 8), Keep(2, 3, 0, 9)), (Keep(1, 0, 0, 1),)))
    table = RotorTable(two, 10)
    assert table.plan(10).kept == (((0, 0),), ((0, 0),)) and table.forward_ns(10) == 10 + 1
    assert table.plan(9).kept == (((0, 1),), ((0, 1),)) and table.forward_ns(9) == 10 + 3 + 1
    assert table.plan(8).kept == ((), ()) and table.plan(8).states == ((), (1,))
    assert table.forward_ns(8) == 10 + 1 + 10  # stage 0 runs again from the start
    assert table.plan(7) is None


@pytest.mark.parametrize("seed", [1, 4, 9])  # three that are chains
def test_the_rotor_measures_of_a_small_recurrence(seed):
    """Read by name off the recurrence (brute.rnn_program): cell t's stage starts from h(t-1), its
    backward reads a(t) and h(t) (tanh_backward and the next cell's mm_backward_w, or the loss), and its
    partial keep is a(t), from which h(t) is made again by its tanh."""
    program = rnn_program(seed, cells=3)
    facts = _Facts(program)
    chain = chain_of(program, facts)
    assert chain is not None and chain.n_stages == 4

    def names(storages) -> set[str]:
        return {program.tensor_names[program.storage_root[s]] for s in storages}

    tanh = [o for o in range(program.n_ops) if program.op_names[o] == "tanh"]
    costs = chain_costs(facts, chain)
    for t in range(1, 4):
        assert names(chain.state[t]) == {f"h{t - 1}"}
        assert names(chain.activations[t]) == {f"a{t}", f"h{t}"}
        assert [names(k) for k in chain.keeps[t]] == [{f"a{t}", f"h{t}"}, {f"a{t}"}]
        assert chain.remake_ns[t] == (0, int(program.op_cost_ns[tanh[t - 1]]))
        sizes = {program.tensor_names[u]: int(program.tensor_size_bytes[u]) for u in range(program.n_tensors)}
        assert costs.activation_bytes[t] == sizes[f"a{t}"] + sizes[f"h{t}"]
        assert costs.gradient_bytes[t] >= sizes[f"g{t}"]  # the gradient coming in, at least


@pytest.mark.slow
def test_a_chain_schedule_replays_within_its_budget_and_never_beats_brute_force():
    made = met = 0
    for seed in range(12):
        program = rnn_program(seed, cells=3)
        low, high = min_budget_bytes(program), budget_from_ratio(program, 1.0)
        for budget in (low + (high - low) // 4, (low + high) // 2):
            got = best_chain_schedule(program, budget, remat_limit_ns=50 * program.compute_ns)
            if got is None:
                continue
            made += 1
            replay = check_schedule(program, got.schedule, budget)
            optimum = brute_force_optimum(program, budget)
            assert replay.peak_bytes <= budget and replay.remat_ns == got.remat_ns
            assert replay.remat_ns >= optimum, (seed, budget)
            met += replay.remat_ns == optimum
    assert made >= 12  # most of these small recurrences are chains
    assert met >= MET_OPTIMUM, (met, made)


@pytest.mark.slow
def test_every_rotor_plan_replays_within_its_budget_and_never_beats_brute_force():
    """Each rotor plan on its own (not only the cheapest): its schedule fits and is no better than the
    optimum, on the small recurrences."""
    made = 0
    for seed in range(6):
        program = rnn_program(seed, cells=3)
        facts = _Facts(program)
        chain = chain_of(program, facts)
        if chain is None:
            continue
        low, high = min_budget_bytes(program), budget_from_ratio(program, 1.0)
        budget = (low + high) // 2
        optimum = brute_force_optimum(program, budget)
        for plan in rotor_plans(facts, chain, budget):
            got = rotor_schedule(program, budget, plan, remat_limit_ns=50 * program.compute_ns, facts=facts,
                                 chain=chain)
            if got is None:
                continue
            made += 1
            replay = check_schedule(program, got.schedule, budget)
            assert replay.peak_bytes <= budget and replay.remat_ns == got.remat_ns >= optimum
    assert made >= 6


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
