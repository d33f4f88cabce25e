"""Glue to the compiled engine: the named arrays it walks, and the policy as its postfix program.

Checks at import that the C module and this dtrlab share opcodes, features, step kinds, buffers,
event kinds, event columns and OOM reasons; turns the C module's instruments into instruments.py's values."""

from __future__ import annotations

import math

import numpy as np

from ..trace.lower import COMPUTE, GET, PIN, RELEASE
from ..trace.lower import Program
from . import formula as fm
from . import instruments as ins
from .policies import EQ_CLASS, HISTORY, NEIGHBORHOOD, Policy
from .progress import PROGRESS_EVERY
from .pyengine import OutOfMemory
from .result import INTERRUPTED, OK, OOM, REMAT_LIMIT
from .runtimes import Runtime

try:
    from . import _cengine
except ImportError:  # pragma: no cover - depends on the build
    _cengine = None

# The buffers _prepared hands over, by name (the C module lists the names it reads).
_BUFFER_NAMES = ("op_cost", "op_size", "op_out_start", "op_n_out", "op_arg_ptr", "op_args", "t_op",
                 "t_storage", "t_size", "s_size", "s_tptr", "s_tensors", "step_kind", "step_target",
                 "f_ptr", "f_list", "f_birth", "r_ptr", "r_list", "r_birth", "s_const")


def _check_interface(mod) -> None:
    """The numbers and names both sides must share: a mismatch is a build of another version."""
    problems = []
    if not hasattr(mod, "OPCODES"):  # a build from before the engines shared their numbers
        raise ImportError("dtrlab.sim._cengine is a build of an older dtrlab: rebuild it "
                          "(pip install -e . or python setup.py build_ext --inplace)")
    if set(mod.OPCODES) != set(fm.OPCODES):
        problems.append(f"opcodes {sorted(set(mod.OPCODES) ^ set(fm.OPCODES))}")
    if mod.FEATURES != {name: k for k, name in enumerate(fm.FEATURES)}:  # in order: the log's term columns
        problems.append(f"features {mod.FEATURES}")
    steps = {"compute": COMPUTE, "get": GET, "pin": PIN, "release": RELEASE}
    if mod.STEP_KINDS != steps:
        problems.append(f"step kinds {mod.STEP_KINDS} != {steps}")
    if [mod.OUTCOMES[k] for k in (OK, OOM, REMAT_LIMIT)] != [0, 1, 2]:
        problems.append(f"outcomes {mod.OUTCOMES}")
    if set(mod.BUFFERS) != set(_BUFFER_NAMES):
        problems.append(f"buffers {sorted(set(mod.BUFFERS) ^ set(_BUFFER_NAMES))}")
    if mod.EVENT_KINDS != ins.EVENT_KINDS:
        problems.append(f"event kinds {mod.EVENT_KINDS} != {ins.EVENT_KINDS}")
    if tuple(mod.EVENT_INT_COLUMNS) != ins.INT_COLUMNS:
        problems.append(f"event columns {tuple(mod.EVENT_INT_COLUMNS)} != {ins.INT_COLUMNS}")
    if tuple(mod.OOM_REASONS) != ins.OOM_REASONS:
        problems.append(f"OOM reasons {tuple(mod.OOM_REASONS)} != {ins.OOM_REASONS}")
    if problems:
        raise ImportError(f"dtrlab.sim._cengine does not match this dtrlab ({'; '.join(problems)}): "
                          "rebuild it (python setup.py build_ext --inplace)")


if _cengine is not None:
    _check_interface(_cengine)


class ScoreOverflow(Exception):
    """A score's integer left the compiled engine's 128 bits: the run needs the exact Python path."""


def _program_arrays(formula: fm.Formula):
    """The formula as the C module's postfix program: int64 (opcode, argument) pairs and float64
    constants (None, None for the random choice)."""
    if formula.is_random:
        return None, None
    prog = fm.postfix(formula)
    ops, feats = _cengine.OPCODES, _cengine.FEATURES
    code = np.array([(ops[op], feats[arg] if op == "feature" else arg) for op, arg in prog.code], np.int64)
    return code, np.array(prog.floats, np.float64)


def compiled_policy(policy: Policy) -> bool:
    """Whether the compiled engine runs this policy: every formula (built-in or not), when it is built."""
    return _policy_obstacle(policy) is None


def _policy_obstacle(policy: Policy) -> str | None:
    if _cengine is None:
        return "the compiled engine is not built (python setup.py build_ext --inplace)"
    if policy.formula is None:
        return f"policy {policy.name} is a Python function, which only the Python engine runs"
    if not policy.formula.is_random and fm.postfix(policy.formula).depth > _cengine.MAX_STACK:
        return f"policy {policy.name}'s formula is deeper than the compiled engine's stack ({_cengine.MAX_STACK})"
    return None


def unsupported(policy: Policy, runtime: Runtime) -> str | None:
    """Why the compiled engine cannot run this policy and runtime (None: it can, on any program)."""
    if runtime.banishing:
        return f"the {runtime.name} runtime runs on the Python engine only"
    return _policy_obstacle(policy)


def supports(policy: Policy, runtime: Runtime, program: Program | None = None) -> bool:
    """Whether the compiled engine runs this policy and runtime: on every program, any operator's
    width and any trace's length (`program` is kept for callers that pass it)."""
    return unsupported(policy, runtime) is None


def _adjacency(src: np.ndarray, dst: np.ndarray, birth: np.ndarray, n: int):
    """CSR of distinct (src -> dst) edges, each at its first birth, ascending birth per src."""
    order = np.lexsort((birth, dst, src))
    src, dst, birth = src[order], dst[order], birth[order]
    first = np.ones(len(src), bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    src, dst, birth = src[first], dst[first], birth[first]
    order = np.lexsort((birth, src))
    ptr = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, dst[order].astype(np.int32), birth[order].astype(np.int32)


def _prepared(program: Program) -> dict:
    """The arrays the compiled engine walks, derived once per program."""
    prep = program.meta.get("_cengine_bufs")
    if prep is not None:
        return prep
    i32, i64 = np.int32, np.int64
    op_size = np.zeros(program.n_ops, i64)
    np.add.at(op_size, program.tensor_op, program.tensor_size_bytes)
    # storage -> tensors, ascending tensor id (a stable sort keeps creation order)
    order = np.argsort(program.tensor_storage, kind="stable").astype(i32)
    s_tptr = np.zeros(program.n_storages + 1, i32)
    np.cumsum(np.bincount(program.tensor_storage, minlength=program.n_storages), out=s_tptr[1:])
    # storage-level edges: (input storage, output storage) of every operator, born with it
    n_args = np.diff(program.op_arg_ptr)
    arg_op = np.repeat(np.arange(program.n_ops, dtype=i32), n_args)
    per_arg = program.op_n_out[arg_op]
    src = np.repeat(program.tensor_storage[program.op_args], per_arg)
    birth = np.repeat(arg_op, per_arg)
    first_out = np.repeat(program.op_out_start[arg_op], per_arg)
    within = np.arange(len(src)) - np.repeat(np.cumsum(per_arg) - per_arg, per_arg)
    dst = program.tensor_storage[first_out + within]
    keep = src != dst  # a storage is never its own neighbour in a traversal
    src, dst, birth = src[keep], dst[keep], birth[keep]
    f_ptr, f_list, f_birth = _adjacency(src, dst, birth, program.n_storages)
    r_ptr, r_list, r_birth = _adjacency(dst, src, birth, program.n_storages)
    arrays = (program.op_cost_ns.astype(i64), op_size, program.op_out_start.astype(i32),
              program.op_n_out.astype(i32), program.op_arg_ptr.astype(i32), program.op_args.astype(i32),
              program.tensor_op.astype(i32), program.tensor_storage.astype(i32),
              program.tensor_size_bytes.astype(i64), program.storage_size_bytes.astype(i64), s_tptr, order,
              program.step_kind.astype(np.int8), program.step_target.astype(i32),
              f_ptr, f_list, f_birth, r_ptr, r_list, r_birth,
              program.storage_constant.astype(np.int8))
    prep = {name: np.ascontiguousarray(a) for name, a in zip(_BUFFER_NAMES, arrays)}
    program.meta["_cengine_bufs"] = prep
    return prep


_OUTCOMES = {0: OK, 1: OOM, 2: REMAT_LIMIT, 7: INTERRUPTED}


def run_compiled(program: Program, budget_bytes: int | None, policy: Policy, runtime: Runtime,
                 remat_limit_ns: float = math.inf, seed: int = 0, counts: bool = False,
                 events: bool = False, oom: bool = False, engine_stats: bool = False, check: bool = False,
                 progress=None, progress_every: int = PROGRESS_EVERY) -> dict:
    """One run on the compiled engine: the RunResult counters, plus when asked the per-storage
    counts (`storage_counts`: policy_evictions, eager_evictions, rematerializations), the event
    log (`events`, an instruments.EventLog) and, at an OOM, the snapshot (`oom`, an OomSnapshot).

    engine_stats adds `region_rebuilds` (e* regions traversed afresh), `region_edges` (the edges
    those traversals walked), `region_updates` (trusted regions updated in place instead) and, of
    those, `region_transfers` (a rematerialized storage's forward region handed on from an input's;
    see _cengine.c). check compares every
    trusted region with a fresh traversal after each step and raises AssertionError at the first
    difference: slow, for tests. Raises ScoreOverflow when a score's integer leaves 128 bits.
    progress: progress.py's callback; when it raises, the outcome is INTERRUPTED and `interrupt`
    holds what it raised (the counters are the run's so far)."""
    code, floats = _program_arrays(policy.formula)
    arrays = None
    if counts:
        arrays = tuple(np.zeros(program.n_storages, np.int64) for _ in range(3))
    out = _cengine.run(_prepared(program), -1 if budget_bytes is None else int(budget_bytes), code, floats,
                       runtime.eager, runtime.optimized and NEIGHBORHOOD in policy.needs,
                       runtime.optimized and EQ_CLASS in policy.needs, HISTORY in policy.needs,
                       float(remat_limit_ns), int(seed) & 0x7FFFFFFFFFFFFFFF, arrays, events, oom, check,
                       progress, int(progress_every), sample=runtime.sample,
                       small_percent=runtime.small_percent)
    if out["outcome"] == _cengine.OUTCOMES["overflow"]:
        raise ScoreOverflow(f"policy {policy.name}: a score's integer left 128 bits")
    out["outcome"] = _OUTCOMES[out["outcome"]]
    interrupt = out.pop("interrupt")
    if out["outcome"] == INTERRUPTED:
        out["interrupt"] = interrupt
    raw_events, raw_oom = out.pop("events"), out.pop("oom")
    work = {k: out.pop(k) for k in ("region_rebuilds", "region_updates", "region_transfers", "region_edges")}
    if engine_stats:
        out.update(work)
    if counts:
        out["storage_counts"] = dict(zip(("policy_evictions", "eager_evictions", "rematerializations"), arrays))
    if events:
        out["events"] = ins.EventLog.from_buffers(raw_events, ins.term_names(policy))
    if oom:
        out["oom"] = None if raw_oom is None else _oom_snapshot(program, budget_bytes, raw_oom)
    return out


def _oom_snapshot(program: Program, budget_bytes: int, raw: dict) -> ins.OomSnapshot:
    stack = np.frombuffer(raw["frames"], np.int64).reshape(-1, 2).tolist()
    residents = [(s, ins.OOM_REASONS[r]) for s, r in np.frombuffer(raw["residents"], np.int64).reshape(-1, 2).tolist()]
    t_op, storage = program.tensor_op, program.tensor_storage
    ptr, args = program.op_arg_ptr, program.op_args
    op_size = _prepared(program)["op_size"]

    def parents_of(t: int):
        op = t_op[t]
        return storage[args[ptr[op]:ptr[op + 1]]].tolist()

    return ins.oom_snapshot(raw["clock_ns"], budget_bytes, raw["memory_bytes"], raw["pool_size"], stack,
                            t_op, op_size, parents_of, program.storage_size_bytes, residents)


def run_observed(program: Program, budget_bytes: int | None, policy: Policy, runtime: Runtime,
                 instruments: ins.Instruments, remat_limit_ns: float = math.inf, seed: int = 0,
                 progress=None, progress_every: int = PROGRESS_EVERY) -> dict:
    """run_compiled with what `instruments` asks for, as the counters plus `observations`."""
    want = instruments
    out = run_compiled(program, budget_bytes, policy, runtime, remat_limit_ns, seed, counts=want.per_storage,
                       events=want.records_events, oom=want.oom_snapshot, progress=progress,
                       progress_every=progress_every)
    counts = out.pop("storage_counts", None)
    out["observations"] = ins.observations(want, counts and tuple(counts.values()), out.pop("events", None),
                                           out.pop("oom", None))
    return out


class Follower:
    """The compiled engine on a whole program whose schedule a source takes a step at a time: the
    live runtime following its plan (live/session.py). Its interface is protocols.FollowedEngine,
    as pyengine.Engine.follow_program's is:
    `step_to(end)` takes the steps before `end` not yet taken (`step()`, those the source has
    reached); `prepare`, `finish` (with no operator), `materialize` and `evict` as the Python
    engine's; the executor is told `compute(op, tensors, remat) -> cost` and `drop(storage,
    by_policy)`. fixed_costs: the executor's costs are the program's (a logical clock); else a
    first run's cost replaces it. Raises pyengine.OutOfMemory as the Python engine does."""

    def __init__(self, program: Program, executor, budget_bytes: float, policy: Policy,
                 runtime: Runtime, seed: int, fixed_costs: bool) -> None:
        bufs = dict(_prepared(program))
        bufs["op_cost"] = bufs["op_cost"].copy()  # its own: a measured clock rewrites it
        code, floats = _program_arrays(policy.formula)
        budget = -1 if budget_bytes == math.inf else int(budget_bytes)
        self._f = _cengine.Follower(bufs, budget, code, floats, runtime.eager,
                                    runtime.optimized and NEIGHBORHOOD in policy.needs,
                                    runtime.optimized and EQ_CLASS in policy.needs, HISTORY in policy.needs,
                                    int(seed) & 0x7FFFFFFFFFFFFFFF, executor, fixed_costs,
                                    sample=runtime.sample, small_percent=runtime.small_percent)
        self._avail = 0
        self._sizes = program.storage_size_bytes.tolist()

    def _outcome(self, outcome: int) -> None:
        if outcome:
            raise OutOfMemory(self._f.counters()["need"])

    def step_to(self, end: int) -> None:
        if end > self._avail:
            self._avail = end
        if self._f.step(self._avail):
            self._outcome(1)

    def step(self) -> None:
        self._outcome(self._f.step(self._avail))

    def prepare(self, args: list[int]) -> None:
        self.step()
        self._outcome(self._f.prepare(args))

    def finish(self, args: list[int], op: None) -> None:
        if op is not None:
            raise ValueError("the compiled follower runs only the program's operators")
        self._f.finish(args)
        self.step()

    def materialize(self, t: int) -> None:
        self.step()
        self._outcome(self._f.materialize(t))

    def evict(self, s: int) -> None:
        self._f.evict(s)

    @property
    def pool(self) -> list[int]:
        return self._f.pool()

    def residents(self) -> list[tuple[int, int, bool, bool]]:
        """(storage, bytes, pinned, locked) of each storage in memory."""
        out = []
        for s, size in enumerate(self._sizes):
            material, pinned, locks = self._f.storage(s)
            if material:
                out.append((s, size, bool(pinned), locks > 0 and not pinned))
        return out

    def _counter(name: str):  # noqa: N805 - a property maker, used in the class body only
        return property(lambda self: self._f.counters()[name], doc=f"The engine's {name}.")

    clock = _counter("clock")
    memory = _counter("memory")
    peak = _counter("peak")
    remat_ns = _counter("remat_ns")
    evictions = _counter("evictions")
    eager_evictions = _counter("eager_evictions")
    score_evals = _counter("score_evals")
    steps_done = _counter("steps_done")
    del _counter
