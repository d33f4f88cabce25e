"""The live session: every aten operator of a PyTorch step, below autograd, under a memory budget,
decided by the simulator's own engine.

The session is a second source of events for the engines (a trace is the first), and their
executor: `compute` runs an operator or replays its recipe, `drop` lets an evicted storage's values
go. The bookkeeping, the policies and the clock are the engine's. Two ways to know a step:

- planned (`plan=`, a capture of the same step: live/plan.py): the engine follows the plan's
  program, on the compiled engine where it runs the policy (sim/cengine.Follower), else on the
  Python one (Engine.follow_program). Each operator is checked against the plan's next Group
  (its name, its arguments' tensors, what it writes, its results' sizes and aliases;
  `PlanMismatch` at the first that differs) and the engine takes the schedule to the Group's end:
  room is made for the outputs before they exist, and the operator's first run happens when the
  engine computes it, exactly as when the plan is simulated. With the logical clock its costs are
  the plan's. Nothing is named or lowered while the step runs.
- unplanned: each operator becomes the instructions its capture would have (capture/naming.Namer,
  the trace recorder's own), lowered one at a time (trace.lower.Lowering); its arguments are made
  resident (Engine.prepare), it runs, then its instructions are taken (Engine.finish): its results
  exist before room is made for them.

The rules (docs/live.md says why each is sound): storage is the unit (a view shares its base's
storage, evicting a storage drops every tensor on it, a view comes back by replaying its view
operator); every write goes to a copy of the written storage's bytes, which becomes the new
version (the trace's MUTATE), and the other tensors on that storage move to it (REBIND); a
constant written in the step gets the final version's bytes back when the step ends; a random
operator's replay restores the generators' states of its first run; operators that change a
tensor's own metadata in place (`transpose_`, `resize_`, `set_`) are refused.
"""

from __future__ import annotations

import functools
import gc
import math
import sys
import weakref
from typing import Callable, NamedTuple, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ..capture.naming import REBIND_OP, VIEW_OP, Namer, replay_views
from ..capture.schema import written_tensors
from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME, LIVE_CLOCKS
from ..errors import DtrlabError, UsageError
from ..sim import cengine
from ..sim.policies import Policy, get_policy
from ..sim.protocols import FollowedEngine, LoweringEngine
from ..sim.pyengine import Engine, OutOfMemory
from ..sim.runtimes import get_runtime
from ..sim.simulate import ENGINES
from ..trace.read import Alias, Annotate, Call, Constant, Copy, Instruction, Memory, Mutate, Release, TraceText
from ..trace.lower import Lowering
from .mismatch import PlanMismatch, brief, plan_mismatch
from .plan import Group, Plan, make_plan
from .where import user_frame
from .recipes import (CALL, CONSTANT, MUTATE, REBIND, Recipe, Run, data_ptr, execute, flatten_call, on_bytes,
                      rng_state, unflatten_call, unflatten_out, window_of)

LOGICAL, MEASURED = LIVE_CLOCKS

__all__ = ["LiveBudgetError", "LiveSession", "LiveTensor", "Plan", "PlanMismatch", "make_plan", "make_wrapper"]


class LiveBudgetError(DtrlabError):
    """The budget cannot be met: everything resident is pinned (constants) or locked (in use).
    where: the user's line of code running then and the part of the step (where.Where.describe)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


class _OpInfo(NamedTuple):
    name: str
    refused: str | None
    random: bool


@functools.lru_cache(maxsize=None)
def _op_info(func) -> _OpInfo:
    """What the session needs of an operator, read once: its name, why it is refused, whether it is random."""
    refused = None
    if torch.Tag.inplace_view in func.tags or func._schema.name in ("aten::set_", "aten::resize_"):
        refused = f"{func} changes a tensor's shape or storage in place, which the live runtime cannot replay"
    return _OpInfo(str(func), refused, torch.Tag.nondeterministic_seeded in func.tags)


def make_wrapper(cls, like: torch.Tensor) -> torch.Tensor:
    """A `cls` (a tensor subclass) with like's metadata and no storage: a wrapper below autograd."""
    return torch.Tensor._make_wrapper_subclass(cls, like.shape, strides=like.stride(),
                                               storage_offset=like.storage_offset(), dtype=like.dtype,
                                               device=like.device, requires_grad=False)


class LiveTensor(torch.Tensor):
    """A wrapper below autograd: metadata only; its value is the session's (`LiveSession.value`).
    A planned session's wrapper carries its tensor in the plan's program (`_tid`)."""

    @staticmethod
    def __new__(cls, session: "LiveSession", like: torch.Tensor):
        t = make_wrapper(cls, like)
        t._session = session
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        flat, _ = flatten_call(args, kwargs or {})
        session = next(x._session for x in flat if isinstance(x, LiveTensor))
        return session.dispatch(func, args, kwargs or {})

    def __repr__(self) -> str:
        tid = self._session.tensor_id(self)
        state = "resident" if tid is not None and self._session.values[tid] is not None else "evicted"
        return f"LiveTensor(shape={tuple(self.shape)}, dtype={self.dtype}, tensor={tid}, {state})"

    # PyTorch refuses these for every subclass (they read the bytes directly): a plain tensor's
    # answer, from the value.
    def tolist(self):
        return self._session.value(self).tolist()

    def numpy(self, *, force: bool = False):
        return self._session.value(self).numpy(force=force)


def pass_pytorch_s_type_checks(cls: type) -> None:
    """Let `cls` pass the checks by which PyTorch chooses a kernel path from its tensors' types, as
    plain tensors pass them, so a step takes the same path live as under its capture (which sees
    plain tensors). PyTorch's foreach and fused kernels (gradient clipping, optimizers left to
    choose) are taken only for the types in two lists of its own; its DTensor adds itself to both
    the same way. Every other check it makes (device, dtype, layout, contiguity, subclass
    predicates) reads the metadata a wrapper copies from its value
    (tests/live/test_live_conformance.py compares each)."""
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for types in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if cls not in types:
            types.append(cls)


pass_pytorch_s_type_checks(LiveTensor)


class _Dispatch:
    """The operator being dispatched: what its recipes share, and its one first run."""

    __slots__ = ("func", "spec", "leaves", "tensor_leaf", "inputs", "arg_names", "mutated", "rng", "run",
                 "wrappers", "group")

    def __init__(self, func, flat, spec, tensor_leaf, inputs, mutated, rng) -> None:
        self.func = func
        self.spec = spec
        self.tensor_leaf = tensor_leaf
        self.leaves = list(flat)
        for i in tensor_leaf:
            self.leaves[i] = None
        self.inputs = inputs  # the caller's objects at the tensor leaves
        self.arg_names: list[str] = []  # unplanned: the namer's names of the inputs
        self.mutated = mutated
        self.rng = rng
        self.run: Run | None = None
        self.wrappers: list[LiveTensor] = []
        self.group: Group | None = None  # planned: the plan's Group it runs as

    def recipe(self, kind: str, args: list[int]) -> Recipe:
        """This operator's recipe for an engine operator of `kind` with these argument tensors."""
        return Recipe(kind, args, self.func, self.spec, self.leaves, self.tensor_leaf, self.mutated, self.rng)


def _dispatch_of(func, info: _OpInfo, args, kwargs) -> _Dispatch:
    """The operator's _Dispatch (its inputs as the caller gave them: other sessions' tensors too)."""
    flat, spec = flatten_call(args, kwargs)
    tensor_leaf, inputs = [], []
    for i, x in enumerate(flat):
        if isinstance(x, torch.Tensor):
            tensor_leaf.append(i)
            inputs.append(x)
    written = written_tensors(func, args, kwargs)
    mutated = [next(j for j, t in enumerate(inputs) if t is w) for w in written] if written else []
    return _Dispatch(func, flat, spec, tensor_leaf, inputs, mutated, rng_state(flat) if info.random else None)


class LiveSession(TorchDispatchMode):
    """Run one step inside `with session:`; its results are LiveTensors, `value(t)` reads one.

    policy: any policy the simulator takes (sim.policies.get_policy); clock: "logical" (an
    operator costs what its plan says, or 1 without a plan) or "measured" (each run its elapsed
    time); plan: a Plan (live/plan.py), the instructions of a capture of the same step
    (capture.recorder.record) or a trace read from a file, or None; seed: the random policy's;
    engine: as `dtrlab simulate`'s (sim.simulate.ENGINES): "auto" is the compiled engine when it
    runs the plan and policy, else the Python one (the compiled engine walks a whole program, so
    it follows a plan, never an unplanned step). after_op: called after every operator (tests force
    evictions with it). At the end of the `with`, the tensors still alive are pinned (as the trace
    format pins the outputs referenced at the end) and the constants written get their new bytes."""

    def __init__(self, budget_bytes: float = math.inf, policy: str | Policy = DEFAULT_POLICY,
                 clock: str = LOGICAL, plan: Plan | TraceText | Sequence[Instruction] | None = None,
                 after_op: Callable[["LiveSession"], None] | None = None, seed: int = 0,
                 engine: str = "auto") -> None:
        super().__init__()
        if clock not in LIVE_CLOCKS:
            raise UsageError(f"unknown clock {clock!r} (known: {', '.join(LIVE_CLOCKS)})")
        if engine not in ENGINES:
            raise UsageError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
        self.budget_bytes = budget_bytes
        self.policy = get_policy(policy)
        self.clock = clock
        self._after_op = after_op
        runtime = get_runtime(DEFAULT_RUNTIME)
        self._plan = make_plan(plan) if plan is not None else None
        compiled = self._plan is not None and cengine.supports(self.policy, runtime, self._plan.program)
        if engine == "c" and not compiled:
            raise UsageError("the compiled engine follows only a plan, with a policy it runs (not built, "
                             "no plan, or a policy written as a Python function)")
        self._setup(engine, runtime, seed, compiled)
        self.engine_name = "c" if isinstance(self.engine, cengine.Follower) else "python"
        self._dispatch: _Dispatch | None = None
        self._stopped: BaseException | None = None  # the error that stopped the step (_guarded)
        self._entered = None  # while the step runs: the frame that entered the session
        self._finishing = False  # the step has returned: what it keeps is being made resident
        self._open = False
        self.finished = False
        self.replays = 0
        self.unplanned_remats = 0  # replays for operators the trace does not have (reading a value)
        self.evicted: list[int] = []  # storages the policy evicted, in order
        # The most bytes of an operator's new tensors that existed before the engine made room for
        # them: unplanned, every operator's; planned, only the results of an operator that also
        # writes (the trace's CALL after its MUTATE makes room once the operator has run).
        self.early_bytes = 0

    def __new__(cls, *args, **kwargs):
        # LiveSession(...) is the planned or the unplanned session, as its plan says
        if cls is LiveSession:
            plan = kwargs.get("plan", args[3] if len(args) > 3 else None)
            cls = PlannedSession if plan is not None else UnplannedSession
        return super().__new__(cls)

    def _setup(self, engine: str, runtime, seed: int, compiled: bool) -> None:
        """The engine and the per-tensor state: the planned or the unplanned session's own."""
        raise NotImplementedError

    @property
    def plan(self) -> tuple[Instruction, ...] | None:
        return self._plan.instructions if self._plan is not None else None

    # --- figures (the engine's) -------------------------------------------------------------
    @property
    def clock_ns(self) -> int:
        return self.engine.clock

    @property
    def remat_ns(self) -> int:
        return self.engine.remat_ns

    @property
    def evictions(self) -> int:
        return self.engine.evictions

    @property
    def eager_evictions(self) -> int:
        return self.engine.eager_evictions

    @property
    def peak_bytes(self) -> int:
        return self.engine.peak

    @property
    def resident_bytes(self) -> int:
        return self.engine.memory

    @property
    def operators(self) -> int:
        """The step's operators that made or wrote tensors (its trace's CALLs and MUTATEs)."""
        raise NotImplementedError

    def _constant_values(self):
        """The constants' values (aliases of the caller's tensors)."""
        raise NotImplementedError

    def constant_bytes(self) -> dict[int, int]:
        """The constants' storages: data pointer -> bytes."""
        return {data_ptr(t): t.untyped_storage().nbytes() for t in self._constant_values()}

    def held(self) -> list[torch.Tensor]:
        """Every value the session holds (constants included): what its memory is."""
        return [v for v in self.values if v is not None]

    def evictable(self) -> list[int]:
        """The engine's pool: storages that may be evicted now, in its order."""
        return list(self.engine.pool)

    def evict(self, storage: int) -> None:
        """Evict an evictable storage now, as the policy would (tests force evictions with it)."""
        self.engine.evict(storage)

    def tensor_id(self, t: torch.Tensor) -> int | None:
        """The engine's tensor for a live tensor or a constant of this session (None if unnamed)."""
        raise NotImplementedError

    # --- the mode --------------------------------------------------------------------------
    def __enter__(self):
        if self._open or self.finished:
            raise UsageError("a LiveSession runs one step: make a new one for the next")
        self._open = True
        self._entered = sys._getframe(1)  # the frame of the `with`: the user's line is looked for below it
        self._replayed = replay_views(True)  # as the recorder records the step (naming.replay_views)
        self._start()
        return super().__enter__()

    def _start(self) -> None:
        """What the session's kind does as the step begins."""
        raise NotImplementedError

    def _stop(self) -> None:
        """What the session's kind undoes as the step ends."""
        raise NotImplementedError

    def __exit__(self, exc_type, exc, tb):
        result = super().__exit__(exc_type, exc, tb)
        try:
            if exc_type is None:
                self._finishing = True
                with _disable_current_modes():
                    self._finish()
        finally:
            self._entered = None
            replay_views(self._replayed)
            self._open = False
            self.finished = True
            self._stop()
        return result

    def dispatch(self, func, args, kwargs):
        """One operator of the step (the mode's handler; PyTorch leaves the mode while it runs)."""
        if not self._open:
            return self._outside(func, args, kwargs)
        if self._stopped is not None:
            return self._after_stop(func, args, kwargs or {})
        info = _op_info(func)
        if info.refused:
            raise UsageError(info.refused)
        result = self._operator(func, info, args, kwargs or {})
        if self._after_op is not None:
            self._after_op(self)
        return result

    def value(self, t: torch.Tensor) -> torch.Tensor:
        """The plain tensor behind `t` (rematerialized if evicted); a plain tensor is itself."""
        if not isinstance(t, LiveTensor):
            return t
        s = t._session
        tid = s.tensor_id(t)
        if tid is None:
            raise UsageError("this live tensor's value is gone: its session has no name for it")
        if s.values[tid] is None:
            with _disable_current_modes():
                s._guarded(s.engine.materialize, tid)
                s.unplanned_remats += 1
        return s.values[tid]

    def _guarded(self, work: Callable, *args) -> None:
        """work(*args), an engine's call: its OutOfMemory is the session's LiveBudgetError, saying
        where in the step it happened. Any error stops the step (`_stopped`)."""
        try:
            work(*args)
        except OutOfMemory as exc:
            if self._finishing:
                at = "at the end of the step (making what it keeps resident, as a trace's final PINs)"
            else:
                where = user_frame(self._entered)
                at = where.describe() if where is not None else ""
            self._stopped = LiveBudgetError(f"out of memory {at}: " * bool(at) + self._why_stuck(exc.args[0]), at)
            raise self._stopped from None
        except BaseException as exc:
            self._stopped = RuntimeError(f"the live step stopped at an error: {exc!r}")
            raise

    def _after_stop(self, func, args, kwargs):
        """An operator after the step stopped (an exit or `finally` the error passes through: the
        `record_function` block an optimizer's step opens, a user's own): it runs plainly on the
        values its arguments have; one that needs an evicted value raises the stop's error again."""
        flat, spec = flatten_call(args, kwargs)
        values = []
        for x in flat:
            if isinstance(x, LiveTensor):
                tid = x._session.tensor_id(x)
                x = x._session.values[tid] if tid is not None else None
                if x is None:
                    raise self._stopped
            values.append(x)
        with _disable_current_modes():
            a, k = unflatten_call(values, spec)
            return func(*a, **k)

    # --- the executor (the engines call these) ------------------------------------------------
    def compute(self, op: int, tensors: list[int], remat: bool) -> int:
        """Give `tensors` (outputs of operator `op`) values: a first run, or a replay. Returns the
        run's cost on the session's clock."""
        r = self.recipes[op]
        if r is None:  # planned: made when the engine first computes it
            r = self.recipes[op] = self._planned_recipe(op)
        start = self._op_start[op]
        if remat:
            self.replays += 1
        if r.kind == CONSTANT:
            self._set(start, r.constant)
            return 0
        if r.kind == REBIND:
            self._set(tensors[0], on_bytes(r.window, self.values[r.args[0]].untyped_storage()))
            return 0
        measured = None
        if remat:
            run = execute(r, [self.values[a] for a in r.args], replay=True)
            measured = run.elapsed_ns
        else:
            d = self._dispatch
            if d.run is None:  # planned: the operator runs now, with room made and its arguments locked
                self._first_run(d, r)
                measured = d.run.elapsed_ns
                if r.kind == MUTATE:
                    self._early(d.run.results)
            run = d.run  # else it ran already: its instructions carry the time (the first of them)
        for t in tensors:
            k = t - start
            self._set(t, run.passed[r.written[k]] if r.kind == MUTATE else run.results[k])
        if self.clock == MEASURED and measured is not None:
            return measured
        return self._op_cost[op]

    def drop(self, storage: int, by_policy: bool) -> None:
        """The engine evicted `storage`: its tensors' values go."""
        if by_policy:
            self.evicted.append(storage)
        values = self.values
        for t in self._on_storage[storage]:
            values[t] = None

    def _set(self, t: int, v: torch.Tensor) -> None:
        self.values[t] = v
        if self.windows[t] is None and (self._windowed is None or t in self._windowed):
            self.windows[t] = window_of(v)

    def _early(self, tensors) -> None:
        self.early_bytes = max(self.early_bytes, sum(t.untyped_storage().nbytes() for t in tensors))

    def _why_stuck(self, need_bytes: int) -> str:
        residents = self.engine.residents()
        pinned = [(s, size) for s, size, pin, _ in residents if pin]
        locked = [(s, size) for s, size, _, lock in residents if lock]
        return (f"the budget of {self.budget_bytes:.0f} bytes cannot be met: {self.engine.memory} bytes "
                f"resident and {need_bytes} more needed; "
                f"pinned: {sum(size for _, size in pinned)} bytes in {len(pinned)} constants; "
                f"locked by the operator in flight: {sum(size for _, size in locked)} bytes in storages "
                f"{', '.join(str(s) for s, _ in locked[:8])}{' ...' if len(locked) > 8 else ''}")

    def _first_run(self, d: _Dispatch, r: Recipe) -> None:
        """The operator's one first run, on its arguments' values, and its results' wrappers."""
        d.run = execute(r, [self.values[a] for a in r.args], replay=False)
        self._after_first_run(d)

    def _returned(self, d: _Dispatch):
        """What the operator returns to its caller: its own objects for what it was given (an
        in-place operator's `self`), the wrappers for its results."""
        run = d.run
        if run.out_spec is None and run.results and run.out_flat[0] is run.results[0]:
            return d.wrappers[0]  # one new tensor, the usual case
        wrapper_of = {id(v): w for v, w in zip(run.results, d.wrappers)}
        out = []
        for v in run.out_flat:
            if isinstance(v, torch.Tensor):
                k = next((k for k, p in enumerate(run.passed) if v is p), None)
                v = d.inputs[k] if k is not None else wrapper_of[id(v)]
            out.append(v)
        return unflatten_out(out, run.out_spec)

    def _outside(self, func, args, kwargs):
        """An operator on live tensors outside their session's step: it runs on their values."""
        flat, spec = flatten_call(args, kwargs or {})
        with _disable_current_modes():
            a, k = unflatten_call([self.value(x) if isinstance(x, LiveTensor) else x for x in flat], spec)
            return func(*a, **k)

    def _finish(self) -> None:
        """Take the schedule to its end (the trace's final PINs: what is still alive), then copy each
        written constant's final version into the caller's tensor."""
        written = self._written_at_the_end()
        done: set[int] = set()
        for t, tid in written:
            ptr = data_ptr(t)
            if ptr not in done:
                done.add(ptr)
                t.untyped_storage().copy_(self.values[tid].untyped_storage())


class PlannedSession(LiveSession):
    """A session that follows its plan (a capture of the same step): operators are matched to the
    plan's Groups and the engine walks the plan's program."""

    def _setup(self, engine: str, runtime, seed: int, compiled: bool) -> None:
        program = self._plan.program
        if compiled and engine != "python":
            self.engine = cengine.Follower(program, self, self.budget_bytes, self.policy, runtime, seed,
                                           fixed_costs=self.clock == LOGICAL)
        else:
            self.engine = Engine.follow_program(program, self, self.budget_bytes, self.policy, runtime, seed)
        self._op_start, self._op_cost = program.op_out_start.tolist(), program.op_cost_ns.tolist()
        self._on_storage = self._plan.storage_tensors
        self.values = [None] * program.n_tensors
        self.windows = [None] * program.n_tensors
        self.recipes = [None] * program.n_ops
        self._group = 0  # the plan's next Group
        self._named = 0  # the plan's constants met so far
        self._const_obj: dict[int, torch.Tensor] = {}  # id -> the caller's tensor (held: its id stays its own)
        self._const_tid: dict[int, int] = {}  # id of a caller's tensor -> its current version's tensor
        self._const_first: dict[int, int] = {}  # id of a caller's tensor -> its CONSTANT's tensor
        self._const_of: dict[int, int] = {}  # a constant's current version -> the caller's tensor's id
        self._const_value: dict[int, torch.Tensor] = {}  # a constant's tensor -> its value (an alias)
        self._moved = {old for g in self._plan.groups for old, _ in g.moves}
        self._windowed = {old for _, old in self._plan.rebound.values()}  # the windows the moves take
        self._movable: dict[int, weakref.ref] = {}  # a tensor a MUTATE moves -> its wrapper
        self._ops = 0

    @property
    def operators(self) -> int:
        return self._ops

    def _constant_values(self):
        return self._const_value.values()

    def tensor_id(self, t: torch.Tensor) -> int | None:
        if isinstance(t, LiveTensor) and t._session is self:
            return t._tid
        return self._const_tid.get(id(t))

    def _start(self) -> None:
        # as the namer does: a tensor in a reference cycle must not die where a collection ran
        self._gc_was_on = gc.isenabled()
        gc.disable()

    def _stop(self) -> None:
        if self._gc_was_on:
            gc.enable()

    def _operator(self, func, info: _OpInfo, args, kwargs):
        try:
            return self._planned(func, info, args, kwargs)
        except PlanMismatch as exc:  # the step stops there: what unwinds runs plainly (_after_stop)
            self._stopped = exc
            raise

    def _after_first_run(self, d: _Dispatch) -> None:
        self._check_results(d)

    def _written_at_the_end(self) -> list[tuple[torch.Tensor, int]]:
        return self._finish_planned()

    # --- planned: following the plan's Groups ---------------------------------------------------
    def _planned(self, func, info: _OpInfo, args, kwargs):
        d = _dispatch_of(func, info, args, kwargs)
        tids = []
        for x in d.inputs:
            if type(x) is LiveTensor and x._session is self:
                tids.append(x._tid)
                continue
            if isinstance(x, LiveTensor):  # another session's: a constant here
                x = self.value(x)
            tid = self._const_tid.get(id(x))
            tids.append(tid if tid is not None else self._new_constant(x))
        g = self._next_group()
        if g is not None and g.name == info.name and g.args == tuple(tids) and self._named == g.constants:
            if tuple(d.mutated) != g.mutated:
                names = tuple(self._plan.program.tensor_names[t] for t in tids)
                raise self._mismatch(g.index, Mutate(0, info.name, names, tuple(d.mutated), 0))
            self._group += 1
            d.group = g
            # its recipes: the MUTATE's and its CALL's (the same run) are this dispatch's
            self.recipes[g.op] = d.recipe(MUTATE if g.mutated else CALL, g.args)
            if g.call_op != g.op and g.call_op >= 0:
                self.recipes[g.call_op] = d.recipe(CALL, g.call_args)
            self._dispatch = d
            try:
                self._guarded(self.engine.step_to, g.steps_end)  # the first run is in `compute`
            finally:
                self._dispatch = None
            self._ops += 1 + (bool(g.mutated) and g.call_op >= 0)
            self._move(g.moves)
        else:
            self._off_plan(d, info, tids, g)
        return self._returned(d)

    def _new_constant(self, x: torch.Tensor) -> int:
        """A tensor made outside the step, met for the first time: the plan's next CONSTANT."""
        constants, g = self._plan.constants, self._next_group()
        nbytes = x.untyped_storage().nbytes()
        if self._named >= len(constants) or (g is not None and self._named >= g.constants):
            where = g.index if g is not None else None
            raise self._mismatch(where, f"a new constant of {nbytes} bytes (a tensor made outside the step)")
        c = constants[self._named]
        if nbytes != c.size_bytes:
            mem = self._plan.instructions[c.index]
            raise self._mismatch(c.index, Memory(0, mem.name, nbytes),
                                 "a parameter or input of another size: the step made at other sizes?")
        self._named += 1
        key = id(x)
        self._const_obj[key] = x
        self._const_tid[key] = self._const_first[key] = c.tensor
        self._const_of[c.tensor] = key
        # An alias of its storage, not the caller's object: the engine pins it, and it is kept as is.
        self._const_value[c.tensor] = x.detach()
        return c.tensor

    def _next_group(self) -> Group | None:
        groups = self._plan.groups
        return groups[self._group] if self._group < len(groups) else None

    def _planned_recipe(self, op: int) -> Recipe:
        """The recipe of a constant or a move of the plan, when the engine first computes it (an
        operator's own are made when it is dispatched)."""
        start = self._op_start[op]
        if start in self._const_value:
            return Recipe(CONSTANT, [], constant=self._const_value[start])
        via, old = self._plan.rebound[op]
        return Recipe(REBIND, [via], window=self.windows[old])

    def _check_results(self, d: _Dispatch) -> None:
        """The first run's results against the plan's CALL: as many, each of the MEMORY size and
        the ALIAS it says; their wrappers, with their tensors."""
        g, run, ins = d.group, d.run, self._plan.instructions
        if len(run.results) != len(g.results):
            where = g.call_index if g.call_index >= 0 else g.index
            raise self._mismatch(where, f"{g.name} making {len(run.results)} new tensors")
        d.wrappers = wrappers = []
        if not run.results:  # a write alone (an in-place operator): nothing to check or wrap
            return
        start = self._op_start[g.call_op] if g.call_op >= 0 else 0
        ptrs = [data_ptr(p) for p in run.passed]
        for k, (v, (size, alias)) in enumerate(zip(run.results, g.results)):
            raw = v.untyped_storage()
            nbytes = raw.nbytes()
            ptr = raw.data_ptr() if nbytes else 0
            same = ptrs.index(ptr) if ptr and ptr in ptrs else -1
            mem = g.call_index + 1 + 2 * k
            if nbytes != size:
                raise self._mismatch(mem, Memory(0, ins[mem].name, nbytes))
            if same != alias:
                raise self._mismatch(mem + 1, Alias(0, ins[mem].name, same))
            w = LiveTensor(self, v)
            wrappers.append(w)
            w._tid = tid = start + k
            if tid in self._moved:
                self._movable[tid] = weakref.ref(w)

    def _move(self, moves: tuple[tuple[int, int], ...]) -> None:
        """A MUTATE's moves: the wrappers and constants on its old tensors now hold the new ones."""
        for old, new in moves:
            ref = self._movable.pop(old, None)
            w = ref() if ref is not None else None
            if w is not None:
                w._tid = new
                if new in self._moved:
                    self._movable[new] = ref
            key = self._const_of.pop(old, None)
            if key is not None:
                self._const_tid[key] = new
                self._const_of[new] = key

    def _off_plan(self, d: _Dispatch, info: _OpInfo, tids: list[int], g: Group | None) -> None:
        """An operator that is not the plan's next: it may neither make nor write tensors (else the
        step is not the plan's). It runs on its arguments as they are when all are resident, so
        the planned schedule is not disturbed; else they are made resident first."""
        names = tuple(self._plan.program.tensor_names[t] for t in tids)
        where = g.index if g is not None else None
        if d.mutated:
            raise self._mismatch(where, Mutate(0, info.name, names, tuple(d.mutated), 0))
        if self._named:  # the constants it met are in the engine's tables
            self._guarded(self.engine.step_to, self._plan.constants[self._named - 1].steps_end)
        quiet = all(self.values[a] is not None for a in tids)
        if not quiet:
            self._guarded(self.engine.prepare, tids)
            self.unplanned_remats += 1
        d.run = run = execute(d.recipe(CALL, tids), [self.values[a] for a in tids], replay=False)
        if not quiet:
            self._guarded(self.engine.finish, tids, None)
        if run.results:
            raise self._mismatch(where, Call(0, info.name, names, tuple("?" * len(run.results)), 0))

    def _mismatch(self, index: int | None, here, likely: str = "") -> PlanMismatch:
        """The first difference: at the plan's instruction `index` (None: after its last), with
        its likely cause where there is one (mismatch.py words it)."""
        return plan_mismatch(index, here, self._plan.instructions, likely, self._entered)

    def _finish_planned(self) -> list[tuple[torch.Tensor, int]]:
        plan = self._plan
        left = [x.index - 1 for x in plan.constants[self._named:self._named + 1]]
        left += [g.index for g in plan.groups[self._group:self._group + 1]]
        if left:
            rest = plan.rest(min(left))
            raise PlanMismatch(f"the step ended before its plan did: {brief(rest[0])} and {len(rest) - 1:,} more "
                               f"of the plan's operators are not run (the step ran fewer operators than its capture)",
                               f"the step ended before its plan did: {rest[0]} and {len(rest) - 1} more "
                               f"instructions are not run")
        self._guarded(self.engine.step_to, len(plan.program.step_kind))
        return [(self._const_obj[key], tid) for key, tid in self._const_tid.items() if tid != self._const_first[key]]


class UnplannedSession(LiveSession):
    """A session with no plan: each operator is named and lowered as it runs, and the Python
    engine follows the program as it grows."""

    def _setup(self, engine: str, runtime, seed: int, compiled: bool) -> None:
        self.namer = Namer(own_releases=True)
        self.lowering = Lowering("<live step>")
        self.engine: FollowedEngine = Engine.follow(self.lowering.builder, self, self.budget_bytes, self.policy,
                                                    runtime, seed)
        b = self.lowering.builder
        self._op_start, self._op_cost = b.op_out_start, b.op_cost  # they grow as the step is lowered
        lowering: LoweringEngine = self.engine
        self._on_storage = lowering.s_tensors  # each storage's tensors (the engine's, growing)
        self.values: list[torch.Tensor | None] = []  # per engine tensor: its value, or None
        self.windows: list = []  # per engine tensor: its window on its storage (set when first made)
        self.recipes: list[Recipe | None] = []  # per engine operator
        self._constants: dict[str, torch.Tensor] = {}  # constant name -> the caller's tensor
        self._fed = 0  # instructions of the namer's lowered so far
        self._windowed = None  # every tensor's window is kept (a move may take it again)

    @property
    def operators(self) -> int:
        return self.namer.operators

    def _constant_values(self):
        return self._constants.values()

    def tensor_id(self, t: torch.Tensor) -> int | None:
        name = self.namer.name(t)
        return None if name is None else self.lowering.bound.get(name)

    def _start(self) -> None:
        self.namer.start()
        self._sync_source()

    def _stop(self) -> None:
        self.namer.stop()

    def _operator(self, func, info: _OpInfo, args, kwargs):
        with self.namer.lock, _disable_current_modes():
            return self._unplanned(func, args, kwargs)

    def _after_first_run(self, d: _Dispatch) -> None:
        d.wrappers = [LiveTensor(self, v) for v in d.run.results]
        self._name_results(d)

    def _written_at_the_end(self) -> list[tuple[torch.Tensor, int]]:
        return self._finish_unplanned()

    # --- unplanned: naming and lowering each operator as it runs ---------------------------------
    def _sync_source(self) -> None:
        """Lower what the namer wrote since the last call and let the engine follow."""
        self._feed(self.namer.out, len(self.namer.out))
        self._guarded(self.engine.step)

    def _feed(self, source: Sequence[Instruction], end: int) -> None:
        """Lower source[self._fed:end] and make the recipes of the operators it creates."""
        low, i = self.lowering, self._fed
        while i < end:
            x = source[i]
            i += 1
            if isinstance(x, Call):
                pairs = source[i:i + 2 * len(x.results)]
                i += 2 * len(x.results)
                sizes = [m.size_bytes for m in pairs[0::2]]
                aliases = [a.alias for a in pairs[1::2]]
                if x.name == REBIND_OP:  # the RELEASE of the rebound name follows: the namer's own
                    release = source[i]
                    i += 1
                    old = low.bound[release.name]
                    low.call(x, sizes, aliases)
                    self._recipe(Recipe(REBIND, self._args_of_last(), window=self.windows[old]))
                    low.release(release)
                elif x.name == VIEW_OP:  # a tensor from outside on a named storage: its value is the caller's
                    low.call(x, sizes, aliases)
                    self._recipe(Recipe(CONSTANT, [], constant=self._constants[x.results[0]]))
                else:
                    low.call(x, sizes, aliases)
                    self._recipe(self._dispatch.recipe(CALL, self._args_of_last()))
            elif isinstance(x, Mutate):
                low.mutate(x)
                self._recipe(self._dispatch.recipe(MUTATE, self._args_of_last()))
            elif isinstance(x, Constant):
                mem = source[i]
                i += 1
                low.constant(x, mem.size_bytes)
                self._recipe(Recipe(CONSTANT, [], constant=self._constants[x.name]))
            elif isinstance(x, Release):
                low.release(x)
            elif isinstance(x, Copy):  # a constant's owner's reference (capture/naming.py)
                low.copy(x)
            elif isinstance(x, Annotate):
                low.annotate(x)
            else:  # Memory and Alias are taken with their CALL or CONSTANT; nothing else is written
                raise AssertionError(f"unexpected instruction {x}")
        self._fed = i

    def _args_of_last(self) -> list[int]:
        b = self.lowering.builder
        return b.op_args[b.op_arg_ptr[-2]:b.op_arg_ptr[-1]]

    def _recipe(self, r: Recipe) -> None:
        self.recipes.append(r)
        n = len(self.lowering.builder.t_op)
        self.values.extend([None] * (n - len(self.values)))
        self.windows.extend([None] * (n - len(self.windows)))

    def _name(self, x: torch.Tensor) -> str:
        """The name of an argument: a live tensor's, or a constant's (named now if new)."""
        if isinstance(x, LiveTensor) and x._session is self:
            name = self.namer.name(x)
            if name is None:
                raise UsageError("a live tensor of this session lost its name (used after its release)")
            return name
        name = self.namer.name(x)
        if name is None:
            name = self.namer.name_of(x)
            # An alias of its storage, not the caller's object: that must be free to die (its
            # RELEASE is the trace's); the alias keeps the bytes, as the engine pins a constant.
            self._constants[name] = x.detach()
        return name

    def _unplanned(self, func, args, kwargs):
        """Arguments made resident and locked, the operator run, then its instructions lowered
        and taken."""
        namer = self.namer
        namer.flush()
        d = _dispatch_of(func, _op_info(func), args, kwargs)
        for k, x in enumerate(d.inputs):
            if isinstance(x, LiveTensor) and x._session is not self:
                d.inputs[k] = self.value(x)  # another session's: a constant here
        namer.mark_backward()
        d.arg_names = [self._name(x) for x in d.inputs]
        self._sync_source()
        self._dispatch = d
        try:
            e = self.engine
            args = [self.lowering.bound[n] for n in d.arg_names]
            self._guarded(e.prepare, args)
            self._first_run(d, d.recipe(CALL, args))
            self._early([*d.run.results, *(d.run.passed[i] for i in d.mutated)])
            first_op = len(self.recipes)
            self._feed(namer.out, len(namer.out))
            op = next((o for o in range(first_op, len(self.recipes)) if self.recipes[o].kind in (CALL, MUTATE)), None)
            self._guarded(e.finish, args, op)
            return self._returned(d)
        finally:
            self._dispatch = None

    def _name_results(self, d: _Dispatch) -> None:
        """The namer writes the operator's instructions."""
        run = d.run
        results = []
        for w, v in zip(d.wrappers, run.results):
            ptr = data_ptr(v)
            same = next((k for k, p in enumerate(run.passed) if ptr and data_ptr(p) == ptr), None)
            key = self.namer.key_of(d.arg_names[same]) if same is not None else self.namer.fresh_key()
            results.append((w, key, v.untyped_storage().nbytes()))
        cost = run.elapsed_ns if self.clock == MEASURED else 1
        self.namer.flush()
        self.namer.emit(str(d.func), d.arg_names, d.mutated, results, cost)

    def _finish_unplanned(self) -> list[tuple[torch.Tensor, int]]:
        self.namer.flush()
        self._sync_source()
        self.lowering.pin_outputs()
        self._guarded(self.engine.step)
        written = []
        for name, t in self._constants.items():
            tid = self.lowering.bound[name]
            original = self.recipes[self.lowering.builder.t_op[tid]]
            if not (original.kind == CONSTANT and original.constant is t):
                written.append((t, tid))
        return written


def _handler(self, func, types, args=(), kwargs=None):
    return self.dispatch(func, args, kwargs)


# The mode's handler, set after the class is made: TorchDispatchMode wraps a handler defined in the
# class body in dynamo's "disable", which costs microseconds an operator; a live step runs eagerly.
LiveSession.__torch_dispatch__ = _handler
