"""Instruments: what a run did storage by storage (evictions, rematerializations, memory, events, OOM).

Owns the observer the pure-Python engine calls back, and the frozen Observations it hands over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.lower import Program
from .result import OOM

# Event kinds of the optional event log.
COMPUTE, REMAT, EVICT, EVICT_EAGER, LOCK = "compute", "remat", "evict", "evict_eager", "lock"

# Why a resident storage could not be evicted at an OOM.
PINNED_CONSTANT, PINNED_OUTPUT, LOCKED, OUTSIDE_POOL = "pinned constant", "pinned output", "locked", "outside pool"


@dataclass(frozen=True)
class Event:
    """One thing the engine did: `storage` is the storage acted on (for compute/remat, the
    storage of the tensor computed), `tensor` the tensor for compute/remat, else -1."""

    kind: str
    clock_ns: int
    storage: int
    tensor: int = -1


@dataclass(frozen=True)
class Frame:
    """One pending (re)computation on the engine's stack at an OOM; depth 0 is the outermost."""

    depth: int
    tensor: int
    op: int
    remat: bool
    need_bytes: int  # what computing its operator adds to memory


@dataclass(frozen=True)
class Resident:
    """A storage in memory at an OOM and why it stayed: `frame` is the depth of the innermost
    frame whose operator takes it as an input (-1 when none does)."""

    storage: int
    size_bytes: int
    reason: str
    frame: int = -1


@dataclass(frozen=True)
class OomSnapshot:
    """The engine at the moment it found nothing left to evict."""

    clock_ns: int
    budget_bytes: int
    memory_bytes: int
    need_bytes: int  # bytes the computation that failed had to add
    tensor: int  # the tensor whose computation failed
    frames: tuple[Frame, ...]
    residents: tuple[Resident, ...]
    pool_size: int  # evictable storages left (0 at an OOM: the engine evicts until none are)


@dataclass(frozen=True)
class Observations:
    """What the instruments saw. Arrays are indexed by storage; absent parts are None.

    policy_evictions / eager_evictions / rematerializations: counts by storage.
    evicted: the distinct storages the policy evicted.
    memory_series: int64 rows [clock_ns, memory_bytes], one per change of memory.
    """

    policy_evictions: np.ndarray | None = None
    eager_evictions: np.ndarray | None = None
    rematerializations: np.ndarray | None = None
    evicted: frozenset[int] | None = None
    memory_series: np.ndarray | None = None
    events: tuple[Event, ...] | None = None
    oom: OomSnapshot | None = None


@dataclass(frozen=True)
class Instruments:
    """Which instruments to attach to a run; `simulate(..., instruments=Instruments())`."""

    per_storage: bool = True
    memory_series: bool = False
    events: bool = False
    oom_snapshot: bool = True

    def observer(self, program: Program) -> "Observer":
        return Observer(self, program)


class Observer:
    """The engine's callbacks. Each records only what its Instruments asked for."""

    def __init__(self, instruments: Instruments, program: Program) -> None:
        self.ins = instruments
        ns = program.n_storages
        self.policy = [0] * ns
        self.eager = [0] * ns
        self.remat = [0] * ns
        self.evicted: set[int] = set()
        self.series: list[tuple[int, int]] = []
        self.events: list[Event] = []
        self._outs: list[tuple[int, bool]] = []  # the pending compute's outputs: (storage, is t)
        self._material: dict[int, bool] = {}  # their storages' materiality, kept up to date
        self._stack = None  # the engine's live frame stack at the last pressure point
        self._need = 0
        self._tensor = -1

    # --- hooks -----------------------------------------------------------------------------
    def on_lock(self, engine, s: int) -> None:
        if self.ins.events:
            self.events.append(Event(LOCK, engine.clock, s))

    def on_evict(self, engine, s: int, by_policy: bool) -> None:
        if s in self._material:
            self._material[s] = False
        if self.ins.per_storage:
            if by_policy:
                self.policy[s] += 1
                self.evicted.add(s)
            else:
                self.eager[s] += 1
        if self.ins.memory_series:
            self.series.append((engine.clock, engine.memory))
        if self.ins.events:
            self.events.append(Event(EVICT if by_policy else EVICT_EAGER, engine.clock, s))

    def on_choose(self, engine, best_s: int, best_score: float) -> None:
        pass

    def on_pressure(self, engine, t: int, stack: list) -> None:
        # Before the engine frees memory for t. The storages the compute will make material are
        # its outputs' storages not material then; freeing memory may still evict a sibling's
        # storage, so on_evict keeps `_material` current until on_compute counts.
        op = engine.t_op[t]
        start, n = engine.op_start[op], engine.op_nout[op]
        ts = engine.t_storage
        self._outs = [(ts[u], u == t) for u in range(start, start + n)]
        self._material = {s: engine.material[s] for s, _ in self._outs}
        self._stack, self._tensor, self._need = stack, t, engine.op_size[op]

    def on_compute(self, engine, t: int, remat: bool) -> None:
        if remat and self.ins.per_storage:
            # the engine's order: the siblings' storages, then t's (a shared storage counts twice)
            mat = self._material
            for s, is_t in self._outs:
                if not is_t and not mat[s]:
                    self.remat[s] += 1
            for s, is_t in self._outs:
                if is_t and not mat[s]:
                    self.remat[s] += 1
        self._material = {}
        if self.ins.memory_series:
            self.series.append((engine.clock, engine.memory))
        if self.ins.events:
            self.events.append(Event(REMAT if remat else COMPUTE, engine.clock, engine.t_storage[t], t))

    # --- the end ---------------------------------------------------------------------------
    def finish(self, engine, outcome: str) -> Observations:
        per = self.ins.per_storage
        arr = (lambda xs: np.asarray(xs, dtype=np.int64)) if per else (lambda xs: None)
        series = None
        if self.ins.memory_series:
            series = np.asarray(self.series, dtype=np.int64).reshape(-1, 2)
        oom = self._snapshot(engine) if (outcome == OOM and self.ins.oom_snapshot) else None
        return Observations(
            policy_evictions=arr(self.policy), eager_evictions=arr(self.eager), rematerializations=arr(self.remat),
            evicted=frozenset(self.evicted) if per else None, memory_series=series,
            events=tuple(self.events) if self.ins.events else None, oom=oom)

    def _snapshot(self, engine) -> OomSnapshot:
        # The engine stops where _free raised: its state and the live stack are the OOM's.
        stack = self._stack or []
        frames = tuple(Frame(k, f[0], engine.t_op[f[0]], bool(f[1]), engine.op_size[engine.t_op[f[0]]])
                       for k, f in enumerate(stack))
        inputs_of: dict[int, int] = {}  # storage -> innermost frame taking it as an input
        for k, f in enumerate(stack):
            for p in engine.parents[f[0]]:
                inputs_of[engine.t_storage[p]] = k
        const = engine.p.op_constant
        residents = []
        for s, on in enumerate(engine.material):
            if not on:
                continue
            if engine.pinned[s]:
                root_op = engine.t_op[engine.s_root[s]]
                reason = PINNED_CONSTANT if const[root_op] else PINNED_OUTPUT
            elif engine.ref_int[s] > 0:
                reason = LOCKED
            elif s in engine.pool:
                reason = "evictable"
            else:
                reason = OUTSIDE_POOL
            residents.append(Resident(s, engine.s_size[s], reason, inputs_of.get(s, -1)))
        return OomSnapshot(engine.clock, int(engine.budget), engine.memory, self._need, self._tensor,
                           frames, tuple(residents), len(engine.pool))
