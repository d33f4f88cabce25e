"""Chain schedules: a forward that is a chain of stages, reversed by a checkpointing dynamic program.

Owns chain_of() (the stages), reversal_plan() (the dynamic program) and best_chain_schedule(). It
serves the traces too large for the exact model, where the portfolio of eviction policies is weakest
at small budgets: an RNN, whose forward is one cell after another.

- **Stages.** Between two forward operators, the *crossing* storages are those made before and read
  by a forward operator after. Where the crossing bytes are at their least (the least over the middle
  half of the forward, once per run of such positions), the forward is cut: for the LSTM, between its
  cells, where only the hidden and cell state cross. The state at a cut is its crossing storages.
- **The plan** (Griewank's checkpointing, as a dynamic program over stages of one average cost):
  reversing l stages from a held state with s free snapshot slots either advances to the last stage
  again for each stage (no slot), or advances m stages, keeps that state in a slot, reverses the l - m
  stages after it with s - 1 slots and then the m before it with s. The first forward is free, and so
  is the last stage's reversal after it. The plan says which states are held while each stage's
  backward runs.
- **The schedule** is made by replaying the program: every operator in order, each missing input made
  again recursively from what is resident, a held state never freed, and under memory pressure the
  storage freed is the one read again furthest ahead (Belady's rule), the backward's own last. A
  storage no operator ahead reads is let go after its last reader's first computation, but kept when
  only a remaking read it (the stage's other activations are made again from it next). Slot counts
  about 25% apart are tried, most first; the cheapest schedule that fits the budget is kept. Like the
  portfolio's, it is a heuristic's schedule, replayed by the checker before it is reported.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..schedule.format import COMPUTE, FREE, Schedule
from ..trace.lower import PIN, Program
from .defaults import CHAIN_MAKER

MIN_STAGES = 4  # fewer stages than this: no chain to checkpoint
_NEVER = 1 << 62  # the next use of a storage read by no later operator
_FREED, _HELD, _GRADIENT = 0, 1, 2  # eviction ranks: freed first, never, last


@dataclass(frozen=True)
class Chain:
    """A program's forward as stages: state[j] the storages held to start stage j again (j >= 1; the
    cut before stage j), forward_ns[j] its operators' cost, stage_of the stage of every storage the
    forward makes (-1 for the others), at_stage[p] the stage whose backward runs at operator p."""

    state: tuple[tuple[int, ...], ...]
    forward_ns: tuple[int, ...]
    stage_of: tuple[int, ...]
    at_stage: tuple[int, ...]

    @property
    def n_stages(self) -> int:
        return len(self.forward_ns)


@dataclass(frozen=True)
class ChainSchedule:
    """A chain schedule and its maker's count of its recompute (the checker's replay is the word that
    counts): slots is the number of states the plan may hold at once besides the first."""

    schedule: Schedule
    remat_ns: int
    slots: int
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
    return Chain(tuple(state), tuple(forward_ns), tuple(stage_of), tuple(at_stage))


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
            remat_limit_ns: float) -> tuple[list, list, int] | None:
    """The schedule of one plan under the budget: (kinds, targets, recompute ns), or None when what must
    be resident at once passes the budget or the recompute passes remat_limit_ns."""
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

    def hold(stages: tuple[int, ...]) -> None:
        nonlocal holding
        want = {s for j in stages for s in chain.state[j]}
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

    now = None
    for p in range(n + 1):
        stage = chain.at_stage[p]
        if stage != now:
            hold(held[stage])
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


def chain_schedule(program: Program, budget_bytes: int, slots: int, *, remat_limit_ns: float = math.inf,
                   facts: _Facts | None = None, chain: Chain | None = None) -> ChainSchedule | None:
    """The schedule of the plan with `slots` slots under the budget, or None when the program is no
    chain, the plan does not fit, or its recompute passes remat_limit_ns."""
    facts = facts or _Facts(program)
    chain = chain or chain_of(program, facts)
    if chain is None:
        return None
    got = _replay(facts, chain, reversal_plan(chain.n_stages, slots), int(budget_bytes), remat_limit_ns)
    if got is None:
        return None
    kinds, targets, remat = got
    schedule = Schedule(np.array(kinds, np.int8), np.array(targets, np.int32), program.sha256,
                        f"{CHAIN_MAKER}:{slots}", int(budget_bytes))
    return ChainSchedule(schedule, remat, slots, chain.n_stages)


def slot_counts(n_stages: int) -> list[int]:
    """The slot counts best_chain_schedule tries, most first: about 25% apart, from n_stages - 1 to 1."""
    counts, k = set(), 1.0
    while k < n_stages:
        counts.add(int(k))
        k = max(k + 1, k * 1.25)
    return sorted(counts, reverse=True)


def best_chain_schedule(program: Program, budget_bytes: int, *, remat_limit_ns: float = math.inf,
                        say=lambda _msg: None) -> ChainSchedule | None:
    """The cheapest chain schedule over slot_counts() (each replay stopped once it costs more than the
    best so far); None when none fits or the program is no chain."""
    facts = _Facts(program)
    chain = chain_of(program, facts)
    if chain is None:
        return None
    best = None
    for slots in slot_counts(chain.n_stages):
        limit = remat_limit_ns if best is None else min(remat_limit_ns, best.remat_ns)
        got = chain_schedule(program, budget_bytes, slots, remat_limit_ns=limit, facts=facts, chain=chain)
        if got is not None and (best is None or got.remat_ns < best.remat_ns):
            best = got
            say(f"chain schedule: {slots} slots over {chain.n_stages} stages, recompute {got.remat_ns} ns")
    return best
