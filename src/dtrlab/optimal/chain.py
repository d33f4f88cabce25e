"""Chain schedules: a forward that is a chain of stages, reversed by checkpointing dynamic programs.

Owns chain_of() (the stages), reversal_plan() (Griewank's plan), chain_costs() and rotor_plans() (the
rotor plan's measures and plans; its dynamic program is rotor.py's), the replay of a plan into a
schedule, and best_chain_schedule(). It serves the traces too large for the exact model, where the
portfolio of eviction policies is weakest at small budgets: an RNN, whose forward is one cell after
another.

- **Stages.** Between two forward operators, the *crossing* storages are those made before and read
  by a forward operator after. Where the crossing bytes are at their least (the least over the middle
  half of the forward, once per run of such positions), the forward is cut: for the LSTM, between its
  cells, where only the hidden and cell state cross. The state at a cut is its crossing storages.
- **Griewank's plan** (a dynamic program over stages of one average cost): reversing l stages from a
  held state with s free snapshot slots either advances to the last stage again for each stage (no
  slot), or advances m stages, keeps that state in a slot, reverses the l - m stages after it with
  s - 1 slots and then the m before it with s. The first forward is free, and so is the last stage's
  reversal after it. The plan says which states are held while each stage's backward runs.
- **The rotor plan** (rotor.py) weighs each stage by its own forward ns, state bytes and activation
  bytes (what its forward makes that a backward operator reads), and may keep a stage's activations
  (a forward-all) or a smaller set they are made again from (a partial keep: what the operators before
  one of the stage's inner cuts make that the operators after it or the backward read). Its plan says
  which states and which keeps are held while each stage's backward runs. Each stage's backward also
  needs room for the backward's own storages (its gradients), measured live from maker to last reader.
- **The schedule** is made by replaying the program: every operator in order, each missing input made
  again recursively from what is resident, what the plan holds never freed, a keep newly held in the
  backward made there before the stage's first operator, and under memory pressure the storage freed
  is the one read again furthest ahead (Belady's rule), the backward's own last. A storage no operator
  ahead reads is let go after its last reader's first computation, but kept when only a remaking read
  it (the stage's other activations are made again from it next). The rotor plans for memories from
  1.5 down to 0.2 of the budget beside the constants, and Griewank's for slot counts about 25% apart,
  are tried; the cheapest schedule that fits the budget is kept. Like the portfolio's, it is a
  heuristic's schedule, replayed by the checker before it is reported.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..schedule.format import COMPUTE, FREE, Schedule
from ..trace.lower import PIN, Program
from .defaults import CHAIN_MAKER
from .rotor import ChainCosts, Keep, RotorPlan, RotorTable

MIN_STAGES = 4  # fewer stages than this: no chain to checkpoint
MAX_PARTIAL_KEEPS = 3  # a stage's partial keeps offered to the rotor plan besides its activations
_NEVER = 1 << 62  # the next use of a storage read by no later operator
_FREED, _HELD, _GRADIENT = 0, 1, 2  # eviction ranks: freed first, never, last
# The shares of the free budget (beside the constants) the rotor plans are made for, most first. Below
# 1 the rest is left to what the plan does not see (the stage's temporaries; its gradients where the
# plan leaves them no room). Above 1 because the plan's count is not the replay's: it counts every
# gradient live from maker to last reader, and Belady's rule keeps more than the plan holds.
ROTOR_SHARES = tuple(x / 20 for x in range(30, 3, -1))  # 1.5, 1.45, ..., 0.2


@dataclass(frozen=True)
class Chain:
    """A program's forward as stages: state[j] the storages held to start stage j again (j >= 1; the
    cut before stage j), forward_ns[j] its operators' cost, stage_of the stage of every storage the
    forward makes (-1 for the others), at_stage[p] the stage whose backward runs at operator p,
    activations[j] the storages stage j's forward makes that a backward operator reads, and keeps[j]
    what a forward-all of stage j may keep (rotor.py; keeps[j][0] its activations), from which its
    activations are made again at remake_ns[j][i]."""

    state: tuple[tuple[int, ...], ...]
    forward_ns: tuple[int, ...]
    stage_of: tuple[int, ...]
    at_stage: tuple[int, ...]
    activations: tuple[tuple[int, ...], ...]
    keeps: tuple[tuple[tuple[int, ...], ...], ...]
    remake_ns: tuple[tuple[int, ...], ...]

    @property
    def n_stages(self) -> int:
        return len(self.forward_ns)


@dataclass(frozen=True)
class ChainSchedule:
    """A chain schedule and its maker's count of its recompute (the checker's replay is the word that
    counts): plan names the plan that made it ("griewank, 19 slots": the states held at once besides
    the first; "rotor, 310,000,000 bytes": the memory the rotor plan was made for)."""

    schedule: Schedule
    remat_ns: int
    plan: str
    stages: int


class _Facts:
    """What every plan's replay reads of the program, computed once."""

    def __init__(self, program: Program) -> None:
        p = program
        self.n_ops = p.n_ops
        self.cost = p.op_cost_ns.tolist()
        ptr, args = p.op_arg_ptr.tolist(), p.op_args.tolist()
        self.args = [args[ptr[o]:ptr[o + 1]] for o in range(p.n_ops)]
        start, count = p.op_out_start.tolist(), p.op_n_out.tolist()
        self.outs = [range(start[o], start[o] + count[o]) for o in range(p.n_ops)]
        self.t_storage = p.tensor_storage.tolist()
        self.t_alias = p.tensor_alias_arg.tolist()
        self.t_op = p.tensor_op.tolist()
        t_size = p.tensor_size_bytes.tolist()
        self.need = [sum(t_size[u] for u in self.outs[o]) for o in range(p.n_ops)]
        self.s_size = p.storage_size_bytes.tolist()
        self.constant_op = p.op_constant.tolist()
        self.backward = p.op_backward.tolist()
        self.s_maker = p.tensor_op[p.storage_root].tolist()
        self.s_constant = [self.constant_op[o] for o in self.s_maker]
        self.s_backward = [self.backward[o] for o in self.s_maker]
        self.s_tensors: list[list[int]] = [[] for _ in range(p.n_storages)]
        for t, s in enumerate(self.t_storage):
            self.s_tensors[s].append(t)
        self.in_storages = [sorted({self.t_storage[a] for a in self.args[o]}) for o in range(p.n_ops)]
        self.pinned = sorted({t for k, t in zip(p.step_kind.tolist(), p.step_target.tolist())
                              if k == PIN and not self.constant_op[self.t_op[t]]})
        # Each storage's readers as first-computation positions; a pinned output is read at the end (n).
        uses: list[list[int]] = [[] for _ in range(p.n_storages)]
        for o in range(p.n_ops):
            for s in self.in_storages[o]:
                uses[s].append(o)
        for t in self.pinned:
            s = self.t_storage[t]
            if not uses[s] or uses[s][-1] != p.n_ops:
                uses[s].append(p.n_ops)
        self.uses = uses


def chain_of(program: Program, facts: _Facts | None = None) -> Chain | None:
    """The program's forward cut into stages where the least bytes cross (module docstring), or None
    when it has fewer than MIN_STAGES or its forward and backward interleave."""
    f = facts or _Facts(program)
    fwd = [o for o in range(f.n_ops) if not f.backward[o] and not f.constant_op[o]]
    if not fwd or any(f.backward[o] for o in range(fwd[-1])):
        return None
    pos = {o: k for k, o in enumerate(fwd)}
    last_fwd_read: dict[int, int] = {}
    for o in fwd:
        for s in f.in_storages[o]:
            if f.s_maker[s] in pos:
                last_fwd_read[s] = pos[o]
    n = len(fwd)
    diff = [0] * (n + 2)
    for s, last in last_fwd_read.items():
        made = pos[f.s_maker[s]]
        if last > made:
            diff[made + 1] += f.s_size[s]
            diff[last + 1] -= f.s_size[s]
    crossing = list(np.cumsum(diff[:n + 1]))
    middle = crossing[max(1, n // 4):max(2, 3 * n // 4)]
    least = min(middle)
    cuts = [k for k in range(1, n) if crossing[k] <= least and (k == 1 or crossing[k - 1] > least)]
    if len(cuts) + 1 < MIN_STAGES:
        return None
    bounds = [0, *cuts, n]
    stage_of = [-1] * len(f.s_size)
    forward_ns = []
    for j in range(len(bounds) - 1):
        forward_ns.append(sum(f.cost[fwd[k]] for k in range(bounds[j], bounds[j + 1])))
        for k in range(bounds[j], bounds[j + 1]):
            for u in f.outs[fwd[k]]:
                if f.t_alias[u] < 0:
                    stage_of[f.t_storage[u]] = j
    state = [()]
    for k in cuts:
        state.append(tuple(s for s, last in last_fwd_read.items() if pos[f.s_maker[s]] < k <= last))
    # The stage whose backward runs at operator p: the latest stage with a storage read at p or after.
    last_read = [-1] * len(forward_ns)
    for s, j in enumerate(stage_of):
        if j >= 0 and f.uses[s]:
            last_read[j] = max(last_read[j], f.uses[s][-1])
    at_stage = [len(forward_ns) - 1] * (f.n_ops + 1)
    j = len(forward_ns) - 1
    for p in range(fwd[-1] + 1, f.n_ops + 1):
        while j > 0 and last_read[j] < p:
            j -= 1
        at_stage[p] = j
    activations = _activations(f, stage_of, len(forward_ns))
    keeps, remake_ns = zip(*(_keeps(f, fwd[lo:hi], activations[j], last_fwd_read, pos)
                             for j, (lo, hi) in enumerate(zip(bounds, bounds[1:]))))
    return Chain(tuple(state), tuple(forward_ns), tuple(stage_of), tuple(at_stage), activations, keeps, remake_ns)


def _keeps(f: _Facts, ops: list[int], activations: tuple[int, ...], last_fwd_read: dict[int, int],
           pos: dict[int, int]) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """What a forward-all of the stage of `ops` may keep (rotor.py) and the ns of making its activations
    again from each: first the activations themselves (0 ns); then, of the stage's inner cuts, what the
    operators before a cut make that an operator after it or the backward reads, made again by the
    operators after it. Only the cuts no other cut betters in both bytes and ns, smaller than the
    activations, at most MAX_PARTIAL_KEEPS of them (those saving the most ns per byte)."""
    acts = set(activations)
    acts_bytes = sum(f.s_size[s] for s in acts)
    options = []
    for k in range(1, len(ops)):
        cut = pos[ops[k]]
        made = [f.t_storage[u] for o in ops[:k] for u in f.outs[o] if f.t_alias[u] < 0]
        keep = tuple(s for s in made if s in acts or last_fwd_read.get(s, -1) >= cut)
        keep_bytes = sum(f.s_size[s] for s in keep)
        if keep and keep_bytes < acts_bytes:
            options.append((keep_bytes, sum(f.cost[o] for o in ops[k:]), keep))
    frontier, least_ns = [], math.inf
    for keep_bytes, ns, keep in sorted(options, key=lambda o: (o[0], o[1])):
        if ns < least_ns:
            frontier.append((keep_bytes, ns, keep))
            least_ns = ns
    stage_ns = sum(f.cost[o] for o in ops)
    frontier.sort(key=lambda o: -(stage_ns - o[1]) / o[0])
    chosen = [(activations, 0)] + [(keep, ns) for _, ns, keep in frontier[:MAX_PARTIAL_KEEPS]]
    return tuple(keep for keep, _ in chosen), tuple(ns for _, ns in chosen)


def _activations(f: _Facts, stage_of: list[int], n_stages: int) -> tuple[tuple[int, ...], ...]:
    """Per stage, the storages its forward makes that a backward operator reads (its backward's
    activations), in the order they are made."""
    acts: list[list[int]] = [[] for _ in range(n_stages)]
    for s, j in enumerate(stage_of):
        if j >= 0 and any(o < f.n_ops and f.backward[o] for o in f.uses[s]):
            acts[j].append(s)
    return tuple(tuple(sorted(a, key=lambda s: f.s_maker[s])) for a in acts)


def chain_costs(f: _Facts, chain: Chain) -> ChainCosts:
    """The chain as the rotor dynamic program sees it: each stage's forward ns, the bytes of its starting
    state and of its activations, what each of its keeps holds and its backward's gradients, measured
    from the program."""
    def size_bytes(storages) -> int:
        return sum(f.s_size[s] for s in storages)

    def keep(j: int, i: int) -> Keep:
        storages = set(chain.keeps[j][i])
        after = set(chain.state[j + 1]) if j + 1 < chain.n_stages else set()
        return Keep(size_bytes(storages), chain.remake_ns[j][i], size_bytes(storages & after),
                    size_bytes(storages | set(chain.activations[j])))

    return ChainCosts(chain.forward_ns, tuple(size_bytes(st) for st in chain.state),
                      tuple(size_bytes(a) for a in chain.activations),
                      tuple(tuple(keep(j, i) for i in range(len(chain.keeps[j]))) for j in range(chain.n_stages)),
                      _gradient_bytes(f, chain))


def _gradient_bytes(f: _Facts, chain: Chain) -> tuple[int, ...]:
    """Per stage, the most bytes the backward's own storages (made by backward operators, each live from
    its maker to its last reader) take at once while the stage's backward runs."""
    live = [0] * (f.n_ops + 2)
    for s in range(len(f.s_size)):
        if f.s_backward[s] and not f.s_constant[s]:
            made = f.s_maker[s]
            last = max(f.uses[s][-1], made) if f.uses[s] else made
            live[made] += f.s_size[s]
            live[last + 1] -= f.s_size[s]
    most = [0] * chain.n_stages
    level = 0
    for p in range(f.n_ops):
        level += live[p]
        if f.backward[p]:
            j = chain.at_stage[p]
            most[j] = max(most[j], level)
    return tuple(most)


@lru_cache(maxsize=None)
def _again(length: int, free: int) -> tuple[int, int]:
    """(cost in stage forwards, the first split: 0 for none) of reversing `length` stages from a held
    state with `free` slots, nothing of them resident."""
    best = (length * (length + 1) // 2, 0)  # advance to each stage in turn, the last first
    if free:
        for m in range(1, length):
            cost = m + _again(length - m, free - 1)[0] + _again(m, free)[0]
            if cost < best[0]:
                best = (cost, m)
    return best


@lru_cache(maxsize=None)
def _first(length: int, free: int) -> tuple[int, int]:
    """The same for the first forward: advancing is free, and the last stage's backward too."""
    best = ((length - 1) * length // 2, 0)
    if free:
        for m in range(1, length):
            cost = _first(length - m, free - 1)[0] + _again(m, free)[0]
            if cost < best[0]:
                best = (cost, m)
    return best


def reversal_plan(n_stages: int, slots: int) -> tuple[tuple[int, ...], ...]:
    """held[j]: the stages whose starting state the plan holds while stage j's backward runs (stage 0's
    is the program's own start and always there), by the dynamic program over stages of equal cost."""
    for length in range(1, n_stages + 1):  # bottom up: the cached recursion stays shallow
        for free in range(slots + 1):
            _first(length, free)
    held: list[tuple[int, ...]] = [()] * n_stages
    stack: list[int] = []
    work = [(0, n_stages, slots, True, None)]  # (start, length, free slots, first forward, pop after)
    while work:
        start, length, free, is_first, pop = work.pop()
        if pop is not None:
            stack.pop()
            continue
        m = (_first if is_first else _again)(length, free)[1] if length > 1 else 0
        if m == 0:
            for j in range(start, start + length):
                held[j] = tuple(stack)
            continue
        # reverse the later part holding start + m, then (after letting it go) the earlier part
        work.append((start, m, free, False, None))
        work.append((0, 0, 0, False, True))
        work.append((start + m, length - m, free - 1, is_first, None))
        stack.append(start + m)
    return tuple(held)


def _replay(f: _Facts, chain: Chain, held: tuple[tuple[int, ...], ...], budget_bytes: int,
            remat_limit_ns: float, kept: tuple[tuple[tuple[int, int], ...], ...] | None = None
            ) -> tuple[list, list, int] | None:
    """The schedule of one plan under the budget: (kinds, targets, recompute ns), or None when what must
    be resident at once passes the budget or the recompute passes remat_limit_ns. While stage j's
    backward runs, the states of held[j] and the keeps of kept[j] ((stage, keep) pairs: none by default)
    are never freed; keeps newly held in the backward are made there, before the stage's first
    operator."""
    n = f.n_ops
    n_st = len(f.s_size)
    resident = bytearray(n_st)
    defined = bytearray(len(f.t_storage))
    locked = [0] * n_st
    nxt = [0] * n_st  # index into uses[s] of the next use at or after the current position
    stamp = [0] * n_st
    heaps: tuple[list, list, list] = ([], [], [])  # by rank; max-heaps on next use
    rank = [_GRADIENT if f.s_backward[s] else _FREED for s in range(n_st)]
    kinds: list[int] = []
    targets: list[int] = []
    memory = remat = 0

    def next_use(s: int) -> int:
        u = f.uses[s]
        return u[nxt[s]] if nxt[s] < len(u) else _NEVER

    def push(s: int) -> None:
        stamp[s] += 1
        heapq.heappush(heaps[rank[s]], (-next_use(s), -f.s_size[s], stamp[s], s))

    def free(s: int) -> None:
        nonlocal memory
        resident[s] = 0
        memory -= f.s_size[s]
        for t in f.s_tensors[s]:
            defined[t] = 0
        kinds.append(FREE)
        targets.append(s)

    def evict_one() -> bool:
        for heap in (heaps[_FREED], heaps[_GRADIENT]):
            kept = []
            while heap:
                entry = heapq.heappop(heap)
                s = entry[3]
                if not resident[s] or entry[2] != stamp[s] or rank[s] == _HELD:
                    continue
                if locked[s]:
                    kept.append(entry)
                    continue
                for e in kept:
                    heapq.heappush(heap, e)
                free(s)
                return True
            for e in kept:
                heapq.heappush(heap, e)
        return False

    holding: set[int] = set()

    def hold(stages: tuple[int, ...], keeping: tuple[tuple[int, int], ...]) -> None:
        nonlocal holding
        want = {s for j in stages for s in chain.state[j]} | {s for j, i in keeping for s in chain.keeps[j][i]}
        for s in holding - want:  # let go: freed like any other storage from now on
            rank[s] = _GRADIENT if f.s_backward[s] else _FREED
            if resident[s]:
                push(s)
        for s in want:
            rank[s] = _HELD
        holding = want

    def make(x: int, first: bool) -> bool:
        """Compute operator x, first making again (recursively, with an explicit stack) every input that
        is not defined; False when it cannot fit or passes the limit."""
        nonlocal memory, remat
        # A frame: an operator and the storages it holds locked. Missing inputs are made first, each held
        # by its caller once made; the resident ones are held only when the operator runs, so a deep
        # chain of remaking does not hold every level's inputs at once.
        stack = [(x, [])]
        while stack:
            o, mine = stack[-1]
            missing = next((a for a in f.args[o] if not defined[a]), None)
            if missing is not None:
                stack.append((f.t_op[missing], []))
                continue
            for s in f.in_storages[o]:
                locked[s] += 1
                mine.append(s)
            while memory + f.need[o] > budget_bytes:
                if not evict_one():
                    return False
            for u in f.outs[o]:
                s = f.t_storage[u]
                if f.t_alias[u] < 0 and not resident[s]:
                    resident[s] = 1
                    memory += f.s_size[s]
                    if not f.s_constant[s]:
                        push(s)
                defined[u] = 1
            kinds.append(COMPUTE)
            targets.append(o)
            if not (first and o == x):
                remat += f.cost[o]
                if remat > remat_limit_ns:
                    return False
            stack.pop()
            for s in mine:
                locked[s] -= 1
            if stack:  # the caller holds what was made for it until it runs
                for u in f.outs[o]:
                    s = f.t_storage[u]
                    locked[s] += 1
                    stack[-1][1].append(s)
        return True

    def make_kept(storages: list[int]) -> bool:
        """Make the storages that are not resident, in the order their makers run (a forward-all)."""
        for s in sorted(storages, key=lambda s: f.s_maker[s]):
            if not resident[s] and not make(f.s_maker[s], False):
                return False
        return True

    def newly(stage: int, before: int) -> list[int]:
        """The storages of the keeps held at `stage` and not at `before`."""
        return [s for j, i in set(kept[stage]) - set(kept[before]) for s in chain.keeps[j][i]]

    kept = kept or ((),) * chain.n_stages
    now = None
    for p in range(n + 1):
        stage = chain.at_stage[p]
        if stage != now:
            hold(held[stage], kept[stage])
            # in the first forward every activation is made in order anyway; later ones are made ahead
            if now is not None and not make_kept(newly(stage, now)):
                return None
            now = stage
        if p == n:
            break
        if not make(p, True):
            return None
        for s in f.in_storages[p]:
            u = f.uses[s]
            while nxt[s] < len(u) and u[nxt[s]] <= p:
                nxt[s] += 1
            if resident[s] and not f.s_constant[s]:
                if next_use(s) == _NEVER and not locked[s] and rank[s] != _HELD:
                    free(s)
                else:
                    push(s)
        for u in f.outs[p]:  # an output no one reads, not pinned: made and let go
            s = f.t_storage[u]
            if (f.t_alias[u] < 0 and resident[s] and not f.s_constant[s] and rank[s] != _HELD
                    and next_use(s) == _NEVER):
                free(s)
    for t in f.pinned:  # the end: every pinned output resident, each made again if it was let go
        if not defined[t] and not make(f.t_op[t], False):
            return None
        locked[f.t_storage[t]] += 1
    return kinds, targets, remat


def _scheduled(program: Program, facts: _Facts, chain: Chain, budget_bytes: int, holds: tuple, name: str,
               plan: str, remat_limit_ns: float) -> ChainSchedule | None:
    """One plan replayed into a schedule (None: it does not fit, or passes remat_limit_ns): holds is
    _replay's (held, kept)."""
    held, kept = holds
    got = _replay(facts, chain, held, int(budget_bytes), remat_limit_ns, kept)
    if got is None:
        return None
    kinds, targets, remat = got
    schedule = Schedule(np.array(kinds, np.int8), np.array(targets, np.int32), program.sha256,
                        f"{CHAIN_MAKER}:{name}", int(budget_bytes))
    return ChainSchedule(schedule, remat, plan, chain.n_stages)


def chain_schedule(program: Program, budget_bytes: int, slots: int, *, remat_limit_ns: float = math.inf,
                   facts: _Facts | None = None, chain: Chain | None = None) -> ChainSchedule | None:
    """The schedule of Griewank's plan with `slots` slots under the budget, or None when the program is
    no chain, the plan does not fit, or its recompute passes remat_limit_ns."""
    facts = facts or _Facts(program)
    chain = chain or chain_of(program, facts)
    if chain is None:
        return None
    return _scheduled(program, facts, chain, budget_bytes, (reversal_plan(chain.n_stages, slots), None),
                      str(slots), f"griewank, {slots} slots", remat_limit_ns)


def rotor_schedule(program: Program, budget_bytes: int, plan: RotorPlan, *, remat_limit_ns: float = math.inf,
                   facts: _Facts | None = None, chain: Chain | None = None) -> ChainSchedule | None:
    """The schedule of a rotor plan (rotor.py) under the budget, or None as chain_schedule's."""
    facts = facts or _Facts(program)
    chain = chain or chain_of(program, facts)
    if chain is None:
        return None
    return _scheduled(program, facts, chain, budget_bytes, (plan.states, plan.kept),
                      f"rotor:{plan.memory_bytes}", f"rotor, {plan.memory_bytes:,} bytes", remat_limit_ns)


def free_bytes(facts: _Facts, budget_bytes: int) -> int:
    """What the budget leaves beside the constants (always resident): the most any plan may hold."""
    return int(budget_bytes) - sum(size for size, c in zip(facts.s_size, facts.s_constant) if c)


def rotor_memories(free: int) -> list[int]:
    """The memories the rotor plans are made for, most first: ROTOR_SHARES of what the budget leaves
    beside the constants."""
    return [int(free * share) for share in ROTOR_SHARES if free * share > 0]


def rotor_plans(f: _Facts, chain: Chain, budget_bytes: int) -> list[RotorPlan]:
    """The distinct rotor plans for rotor_memories(), most memory first, from four tables: with and
    without room for each stage's backward's gradients (the room is an upper bound: every backward
    storage counted live from its maker to its last reader, where the replay may free it sooner), each
    topped at the free bytes and at ROTOR_SHARES[0] of them (the levels are that top's 500th, and the
    replay's overhead moves by ~1% with them: without the gradients' room, the LSTM at 0.2 gets 1.3030x
    from the first top, 1.3190x from the second; at 0.265, 1.2574x and 1.2556x)."""
    free = free_bytes(f, budget_bytes)
    if free <= 0:
        return []
    costs = chain_costs(f, chain)
    plans, seen = [], set()
    for model in (costs, replace(costs, gradient_bytes=())):
        for top in (1.0, ROTOR_SHARES[0]):
            table = RotorTable(model, int(free * top))
            for memory in rotor_memories(free):
                plan = table.plan(memory) if memory <= free * top else None
                if plan is not None and (plan.states, plan.kept) not in seen:
                    seen.add((plan.states, plan.kept))
                    plans.append(plan)
    return plans


def slot_counts(n_stages: int) -> list[int]:
    """The slot counts best_chain_schedule tries, most first: about 25% apart, from n_stages - 1 to 1."""
    counts, k = set(), 1.0
    while k < n_stages:
        counts.add(int(k))
        k = max(k + 1, k * 1.25)
    return sorted(counts, reverse=True)


def best_chain_schedule(program: Program, budget_bytes: int, *, remat_limit_ns: float = math.inf,
                        say=lambda _msg: None) -> ChainSchedule | None:
    """The cheapest chain schedule of the rotor plans (rotor_plans()) and Griewank's over slot_counts(),
    each replay stopped once it costs more than the best so far; None when none fits or the program is
    no chain."""
    facts = _Facts(program)
    chain = chain_of(program, facts)
    if chain is None:
        return None
    best = None

    def limit() -> float:
        return remat_limit_ns if best is None else min(remat_limit_ns, best.remat_ns)

    tries = [lambda plan=plan: rotor_schedule(program, budget_bytes, plan, remat_limit_ns=limit(), facts=facts,
                                              chain=chain)
             for plan in rotor_plans(facts, chain, budget_bytes)]
    tries += [lambda slots=slots: chain_schedule(program, budget_bytes, slots, remat_limit_ns=limit(), facts=facts,
                                                 chain=chain)
              for slots in slot_counts(chain.n_stages)]
    for attempt in tries:
        got = attempt()
        if got is not None and (best is None or got.remat_ns < best.remat_ns):
            best = got
            say(f"chain schedule: {got.plan} over {chain.n_stages} stages, recompute {got.remat_ns} ns")
    return best
