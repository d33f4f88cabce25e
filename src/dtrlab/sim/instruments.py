"""Instruments: what a run did, storage by storage and event by event (counts, memory, events, OOM).

Owns the event log and the OOM snapshot both engines hand over (the same values from each), the
observer the pure-Python engine calls back, and the frozen Observations a run returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..trace.lower import Program
from .result import OOM

# Event kinds of the event log and their int8 codes (the compiled engine exports the same table).
COMPUTE, REMAT, EVICT, EVICT_EAGER, LOCK = "compute", "remat", "evict", "evict_eager", "lock"
EVENT_KINDS = {COMPUTE: 0, REMAT: 1, EVICT: 2, EVICT_EAGER: 3, LOCK: 4}
KIND_NAMES = tuple(EVENT_KINDS)
# The int64 columns of the log, after `kind`; then the float64 `score` and the `terms` matrix.
INT_COLUMNS = ("clock_ns", "storage", "tensor", "depth", "memory_bytes", "pinned_bytes", "locked_bytes",
               "pool_size")
EVENT_COLUMNS = ("kind", *INT_COLUMNS, "score", "terms")

# Why a resident storage could not be evicted at an OOM; a reason's code is its position here
# (the compiled engine exports the same table).
PINNED_CONSTANT, PINNED_OUTPUT, LOCKED, EVICTABLE, OUTSIDE_POOL = (
    "pinned constant", "pinned output", "locked", "evictable", "outside pool")
OOM_REASONS = (PINNED_CONSTANT, PINNED_OUTPUT, LOCKED, EVICTABLE, OUTSIDE_POOL)

# A storage's share of the log's byte columns: not counted, on a locked unpinned storage, pinned.
_FREE, _LOCKED, _PINNED = 0, 1, 2


def term_names(policy) -> tuple[str, ...]:
    """The features of a policy's formula, in the language's order: the log's `terms` columns
    (none for the random choice or a score written as a Python function)."""
    formula = policy.formula
    if formula is None or formula.is_random:
        return ()
    from .formula import FEATURES

    used = formula.features
    return tuple(f for f in FEATURES if f in used)


@dataclass(frozen=True)
class Event:
    """One thing the engine did: `storage` is the storage acted on (for compute/remat, the
    storage of the tensor computed), `tensor` the tensor for compute/remat, else -1."""

    kind: str
    clock_ns: int
    storage: int
    tensor: int = -1


@dataclass(frozen=True, eq=False)
class EventLog:
    """Every engine event of a run, in order, as numpy columns of equal length.

    kind (int8, EVENT_KINDS); clock_ns: the clock after the event; storage; tensor (-1 unless
    compute/remat); depth: for compute/remat the depth of its frame on the (re)materialization
    stack (0: the schedule's own step), else -1; memory_bytes, pinned_bytes, locked_bytes
    (resident bytes; of them on pinned storages; on locked unpinned ones) and pool_size
    (evictable storages), all after the event; score (float64): the chosen storage's score at a
    policy eviction, NaN elsewhere; terms (float64 [n, len(term_names)]): the value of each of
    the formula's features for the chosen storage at that choice, NaN elsewhere.
    """

    kind: np.ndarray
    clock_ns: np.ndarray
    storage: np.ndarray
    tensor: np.ndarray
    depth: np.ndarray
    memory_bytes: np.ndarray
    pinned_bytes: np.ndarray
    locked_bytes: np.ndarray
    pool_size: np.ndarray
    score: np.ndarray
    terms: np.ndarray
    term_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.kind)

    def __iter__(self):
        names = KIND_NAMES
        for k, c, s, t in zip(self.kind.tolist(), self.clock_ns.tolist(), self.storage.tolist(),
                              self.tensor.tolist()):
            yield Event(names[k], c, s, t)

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in EVENT_COLUMNS}

    def select(self, mask: np.ndarray) -> "EventLog":
        """The rows where `mask` (a boolean array, or indices) holds, in order."""
        return EventLog(**{k: v[mask] for k, v in self.columns().items()}, term_names=self.term_names)

    def rows(self, kind: str | tuple[str, ...] | None = None) -> "EventLog":
        """The rows of one kind or several (`rows(kind="evict")`, `rows(kind=(EVICT, EVICT_EAGER))`)."""
        if kind is None:
            return self
        kinds = (kind,) if isinstance(kind, str) else kind
        unknown = [k for k in kinds if k not in EVENT_KINDS]
        if unknown:
            raise ValueError(f"unknown event kind {unknown[0]!r} (known: {', '.join(KIND_NAMES)})")
        return self.select(np.isin(self.kind, [EVENT_KINDS[k] for k in kinds]))

    def term(self, name: str) -> np.ndarray:
        """One feature's column of `terms`."""
        return self.terms[:, self.term_names.index(name)]

    def memory_series(self) -> np.ndarray:
        """int64 rows [clock_ns, memory_bytes], one per compute, rematerialization and eviction."""
        rows = self.kind != EVENT_KINDS[LOCK]
        return np.stack([self.clock_ns[rows], self.memory_bytes[rows]], axis=1).astype(np.int64).reshape(-1, 2)

    def equals(self, other: "EventLog") -> bool:
        """Row for row the same log (NaN equals NaN)."""
        if self.term_names != other.term_names or len(self) != len(other):
            return False
        return all(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
                   for a, b in zip(self.columns().values(), other.columns().values()))

    @staticmethod
    def from_buffers(buffers: dict, term_names: tuple[str, ...]) -> "EventLog":
        """A log over the compiled engine's column buffers (bytes or arrays), without copying."""
        cols = {"kind": np.frombuffer(buffers["kind"], np.int8)}
        cols.update({name: np.frombuffer(buffers[name], np.int64) for name in INT_COLUMNS})
        cols["score"] = np.frombuffer(buffers["score"], np.float64)
        cols["terms"] = np.frombuffer(buffers["terms"], np.float64).reshape(len(cols["kind"]), len(term_names))
        return EventLog(**cols, term_names=term_names)


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


def oom_snapshot(clock_ns: int, budget_bytes: int, memory_bytes: int, pool_size: int,
                 stack: list[tuple[int, bool]], t_op, op_size, parents_of, s_size,
                 residents: list[tuple[int, str]]) -> OomSnapshot:
    """The snapshot from what either engine holds at its OOM: the stack's (tensor, remat) frames,
    outermost first, and the resident storages with their reasons, ascending; `parents_of(t)`
    lists the inputs of t's operator."""
    frames = tuple(Frame(k, t, int(t_op[t]), bool(remat), int(op_size[t_op[t]])) for k, (t, remat) in enumerate(stack))
    inputs_of: dict[int, int] = {}  # storage -> innermost frame taking it as an input
    for f in frames:
        for s in parents_of(f.tensor):
            inputs_of[s] = f.depth
    need, tensor = (frames[-1].need_bytes, frames[-1].tensor) if frames else (0, -1)
    return OomSnapshot(int(clock_ns), int(budget_bytes), int(memory_bytes), need, tensor, frames,
                       tuple(Resident(s, int(s_size[s]), reason, inputs_of.get(s, -1)) for s, reason in residents),
                       int(pool_size))


@dataclass(frozen=True)
class Observations:
    """What the instruments saw. Arrays are indexed by storage; absent parts are None.

    policy_evictions / eager_evictions / rematerializations: counts by storage.
    evicted: the distinct storages the policy evicted.
    memory_series: int64 rows [clock_ns, memory_bytes], one per change of memory.
    events: the EventLog; oom: the OomSnapshot of a run that ran out of memory.
    """

    policy_evictions: np.ndarray | None = None
    eager_evictions: np.ndarray | None = None
    rematerializations: np.ndarray | None = None
    evicted: frozenset[int] | None = None
    memory_series: np.ndarray | None = None
    events: EventLog | None = None
    oom: OomSnapshot | None = None


@dataclass(frozen=True)
class Instruments:
    """Which instruments to attach to a run; `simulate(..., instruments=Instruments())`. Either
    engine gives each of them, with the same values."""

    per_storage: bool = True
    memory_series: bool = False
    events: bool = False
    oom_snapshot: bool = True

    @property
    def records_events(self) -> bool:
        """The memory series is read off the event log, so either asks the engine for events."""
        return self.events or self.memory_series

    def observer(self, program: Program) -> "Observer":
        return Observer(self, program)


def observations(ins: Instruments, counts: tuple | None, log: EventLog | None, oom: OomSnapshot | None) -> Observations:
    """The Observations of a run from the three arrays of per-storage counts (policy, eager,
    remat), the event log and the OOM snapshot, keeping the parts `ins` asked for."""
    per = ins.per_storage and counts is not None
    policy, eager, remat = counts if per else (None, None, None)
    return Observations(policy_evictions=policy, eager_evictions=eager, rematerializations=remat,
                        evicted=frozenset(np.flatnonzero(policy).tolist()) if per else None,
                        memory_series=log.memory_series() if ins.memory_series else None,
                        events=log if ins.events else None, oom=oom if ins.oom_snapshot else None)


def _as_float(x) -> float:
    try:
        return float(x)
    except OverflowError:  # an exact integer past the doubles (Python engine only)
        return math.inf if x > 0 else -math.inf


class Observer:
    """The Python engine's callbacks. Each records only what its Instruments asked for."""

    def __init__(self, instruments: Instruments, program: Program) -> None:
        self.ins = instruments
        self.names = None  # the policy's term names, known at the first choice
        ns = program.n_storages
        self.policy = [0] * ns
        self.eager = [0] * ns
        self.remat = [0] * ns
        self.rec = instruments.records_events
        self.cols: dict[str, list] = {name: [] for name in ("kind", *INT_COLUMNS, "score")}
        self.terms: list[tuple] = []
        self._share = [_FREE] * ns  # each storage's share of pinned_bytes / locked_bytes
        self._bytes = [0, 0, 0]  # by share: (unused), locked, pinned
        self._choice: tuple[float, tuple] | None = None  # score and terms of the pending eviction
        self._terms_of = None
        self._outs: list[tuple[int, bool]] = []  # the pending compute's outputs: (storage, is t)
        self._material: dict[int, bool] = {}  # their storages' materiality, kept up to date
        self._stack = None  # the engine's live frame stack at the last pressure point

    # --- the log -----------------------------------------------------------------------------
    def _reshare(self, engine, s: int) -> None:
        # The log's byte columns follow each storage's state: resident and pinned, resident and
        # locked, or neither; every hook that may change one of those calls this.
        share = _FREE
        if engine.material[s]:
            share = _PINNED if engine.pinned[s] else _LOCKED if engine.ref_int[s] > 0 else _FREE
        old = self._share[s]
        if share != old:
            size = engine.s_size[s]
            self._bytes[old] -= size
            self._bytes[share] += size
            self._share[s] = share

    def _row(self, engine, kind: str, s: int, t: int = -1, depth: int = -1, score: float = math.nan,
             terms: tuple | None = None) -> None:
        c = self.cols
        for name, value in (("kind", EVENT_KINDS[kind]), ("clock_ns", engine.clock), ("storage", s),
                            ("tensor", t), ("depth", depth), ("memory_bytes", engine.memory),
                            ("pinned_bytes", self._bytes[_PINNED]), ("locked_bytes", self._bytes[_LOCKED]),
                            ("pool_size", len(engine.pool)), ("score", score)):
            c[name].append(value)
        self.terms.append(terms)

    def _log(self, names: tuple[str, ...]) -> EventLog:
        cols = {"kind": np.asarray(self.cols["kind"], np.int8)}
        cols.update({name: np.asarray(self.cols[name], np.int64) for name in INT_COLUMNS})
        cols["score"] = np.asarray(self.cols["score"], np.float64)
        nan = (math.nan,) * len(names)
        cols["terms"] = np.asarray([nan if t is None else t for t in self.terms], np.float64).reshape(len(self.terms), len(names))
        return EventLog(**cols, term_names=names)

    # --- hooks -----------------------------------------------------------------------------
    def on_lock(self, engine, s: int) -> None:
        if self.rec:
            self._reshare(engine, s)
            self._row(engine, LOCK, s)

    def on_unlock(self, engine, s: int) -> None:
        if self.rec:
            self._reshare(engine, s)

    def on_pin(self, engine, s: int) -> None:
        if self.rec:
            self._reshare(engine, s)

    def on_evict(self, engine, s: int, by_policy: bool) -> None:
        if s in self._material:
            self._material[s] = False
        if self.ins.per_storage:
            if by_policy:
                self.policy[s] += 1
            else:
                self.eager[s] += 1
        if self.rec:
            self._reshare(engine, s)
            score, terms = self._choice if by_policy and self._choice else (math.nan, None)
            self._choice = None
            self._row(engine, EVICT if by_policy else EVICT_EAGER, s, score=score, terms=terms)

    def on_choose(self, engine, best_s: int, best_score) -> None:
        if self.rec:
            if self._terms_of is None:
                self.names = term_names(engine.policy)
                self._terms_of = engine.terms_function(self.names)
            self._choice = (_as_float(best_score), tuple(_as_float(v) for v in self._terms_of(best_s)))

    def on_pressure(self, engine, t: int, stack: list) -> None:
        # Before the engine frees memory for t. The storages the compute will make material are
        # its outputs' storages not material then; freeing memory may still evict a sibling's
        # storage, so on_evict keeps `_material` current until on_compute counts.
        op = engine.t_op[t]
        start, n = engine.op_start[op], engine.op_nout[op]
        ts = engine.t_storage
        self._outs = [(ts[u], u == t) for u in range(start, start + n)]
        self._material = {s: engine.material[s] for s, _ in self._outs}
        self._stack = stack

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
        if self.rec:
            for s, _ in self._outs:
                self._reshare(engine, s)
            self._row(engine, REMAT if remat else COMPUTE, engine.t_storage[t], t, len(self._stack) - 1)

    # --- the end ---------------------------------------------------------------------------
    def finish(self, engine, outcome: str) -> Observations:
        counts = tuple(np.asarray(x, dtype=np.int64) for x in (self.policy, self.eager, self.remat))
        log = self._log(self.names if self.names is not None else term_names(engine.policy)) if self.rec else None
        oom = self._snapshot(engine) if (outcome == OOM and self.ins.oom_snapshot) else None
        return observations(self.ins, counts, log, oom)

    def _snapshot(self, engine) -> OomSnapshot:
        # The engine stops where _free raised: its state and the live stack are the OOM's.
        const = engine.p.op_constant
        residents = []
        for s, on in enumerate(engine.material):
            if not on:
                continue
            if engine.pinned[s]:
                reason = PINNED_CONSTANT if const[engine.t_op[engine.s_root[s]]] else PINNED_OUTPUT
            elif engine.ref_int[s] > 0:
                reason = LOCKED
            elif s in engine.pool:
                reason = EVICTABLE
            else:
                reason = OUTSIDE_POOL
            residents.append((s, reason))
        ts = engine.t_storage
        return oom_snapshot(engine.clock, engine.budget, engine.memory, len(engine.pool),
                            [(f[0], f[1]) for f in self._stack or []], engine.t_op, engine.op_size,
                            lambda t: [ts[p] for p in engine.parents[t]], engine.s_size, residents)
