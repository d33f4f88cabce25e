"""The live session: every aten operator of a PyTorch step, below autograd, under a memory budget,
decided by the simulator's own engine.

The session is a second source of events for sim/pyengine.py's Engine (a trace is the first):
each operator becomes the instructions its capture would have (capture/naming.Namer, the trace
recorder's own), lowered one at a time (trace.lower.Lowering); the engine follows the lowered
schedule and decides what to evict and what to rematerialize, and the session carries it out as
the engine's executor (`compute`: run an operator, or replay its recipe; `evict`: drop the values
of a storage's tensors). The bookkeeping, the policies and the clock are the engine's.

Two ways to know an operator's outputs:
- planned (`plan=`, the instructions of a capture of the same step): before an operator runs, the
  engine takes its instructions from the plan, so room is made for its outputs before they exist,
  exactly as when the plan is simulated; the instructions the step makes are checked against the
  plan's (`PlanMismatch` at the first that differs). With the logical clock its costs are the plan's.
- unplanned: the arguments are made resident (Engine.prepare), the operator runs, then its
  instructions are taken (Engine.finish): its results exist before room is made for them.

The rules (docs/live.md says why each is sound): storage is the unit (a view shares its base's
storage, evicting a storage drops every tensor on it, a view comes back by replaying its view
operator); every write goes to a copy of the written storage's bytes, which becomes the new
version (the trace's MUTATE), and the other tensors on that storage move to it (REBIND); a
constant written in the step gets the final version's bytes back when the step ends; a random
operator's replay restores the generators' states of its first run; operators that change a
tensor's own metadata in place (`transpose_`, `resize_`, `set_`) are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..capture.naming import REBIND_OP, Namer
from ..capture.schema import written_tensors
from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME, LIVE_CLOCKS
from ..errors import DtrlabError, UsageError
from ..sim import cengine
from ..sim.policies import Policy, get_policy
from ..sim.pyengine import Engine, OutOfMemory
from ..sim.runtimes import get_runtime
from ..sim.simulate import ENGINES
from ..trace.read import Annotate, Call, Constant, Instruction, Mutate, Release, TraceSource, TraceText
from ..trace.lower import Lowering, Program, lower
from .recipes import CALL, CONSTANT, MUTATE, REBIND, Recipe, Run, data_ptr, execute, on_bytes, rng_state, window_of

LOGICAL, MEASURED = LIVE_CLOCKS


class LiveBudgetError(DtrlabError):
    """The budget cannot be met: everything resident is pinned (constants) or locked (in use)."""


class PlanMismatch(UsageError):
    """The step made an instruction its plan does not have there (it is not the planned step)."""


def _refused(func) -> str | None:
    if torch.Tag.inplace_view in func.tags or func._schema.name in ("aten::set_", "aten::resize_"):
        return f"{func} changes a tensor's shape or storage in place, which the live runtime cannot replay"
    return None


_UNCHECKED = (Release, Annotate)


def _same(a: Instruction, b: Instruction) -> bool:
    """Equal but for times and line numbers (a plan's costs are its own; a live step's lines are 0)."""
    if isinstance(a, (Call, Mutate)) and isinstance(b, type(a)):
        return a._replace(time_ns=0, line=0) == b._replace(time_ns=0, line=0)
    return type(a) is type(b) and a._replace(line=0) == b._replace(line=0)


@dataclass(frozen=True, eq=False)
class Plan:
    """What a planned session follows: the instructions of a capture of the same step, and their
    program (lowered once: the compiled engine walks the whole program). `make_plan` makes one."""

    instructions: tuple[Instruction, ...]
    program: Program


def make_plan(plan: "Plan | TraceText | Sequence[Instruction]") -> Plan:
    """A Plan of a capture's instructions or a trace read from a file (a Plan is itself)."""
    if isinstance(plan, Plan):
        return plan
    if not isinstance(plan, TraceText):
        source = TraceSource("plan", "plan", "<plan>", True, lambda: b"")
        plan = TraceText(source, "", tuple(plan), 0)
    return Plan(tuple(plan.instructions), lower(plan))


class LiveTensor(torch.Tensor):
    """A wrapper below autograd: metadata only; its value is the session's (`LiveSession.value`)."""

    @staticmethod
    def __new__(cls, session: "LiveSession", like: torch.Tensor):
        t = torch.Tensor._make_wrapper_subclass(cls, like.shape, strides=like.stride(),
                                                storage_offset=like.storage_offset(), dtype=like.dtype,
                                                device=like.device, requires_grad=False)
        t._session = session
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        flat, _ = tree_flatten((args, kwargs))
        session = next(x._session for x in flat if isinstance(x, LiveTensor))
        return session.dispatch(func, args, kwargs or {})

    def __repr__(self) -> str:
        tid = self._session.tensor_id(self)
        state = "resident" if tid is not None and self._session.values[tid] is not None else "evicted"
        return f"LiveTensor(shape={tuple(self.shape)}, dtype={self.dtype}, tensor={tid}, {state})"


class _Dispatch:
    """The operator being dispatched: what its recipes share, and its one first run."""

    __slots__ = ("func", "spec", "leaves", "tensor_leaf", "flat", "inputs", "arg_names", "mutated", "rng",
                 "run", "wrappers")

    def __init__(self, func, flat, spec, inputs, arg_names, mutated, rng) -> None:
        self.func = func
        self.flat = flat
        self.spec = spec
        self.tensor_leaf = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
        self.leaves = [None if isinstance(x, torch.Tensor) else x for x in flat]
        self.inputs = inputs
        self.arg_names = arg_names
        self.mutated = mutated
        self.rng = rng
        self.run: Run | None = None
        self.wrappers: list[LiveTensor] = []

    def recipe(self, kind: str, args: list[int]) -> Recipe:
        """This operator's recipe for an engine operator of `kind` with these argument tensors."""
        return Recipe(kind, args, self.func, self.spec, self.leaves, self.tensor_leaf, self.mutated, self.rng)


class LiveSession(TorchDispatchMode):
    """Run one step inside `with session:`; its results are LiveTensors, `value(t)` reads one.

    policy: any policy the simulator takes (sim.policies.get_policy); clock: "logical" (an
    operator costs what its plan says, or 1 without a plan) or "measured" (each run its elapsed
    time); plan: a Plan, or the instructions of a capture of the same step (capture.recorder.record),
    or None; seed: the random policy's; engine: as `dtrlab simulate`'s (sim.simulate.ENGINES):
    "auto" is the compiled engine when it runs the plan and policy, else the Python engine (the
    compiled engine walks a whole program, so it follows a plan, never an unplanned step). after_op: called after every operator (tests force
    evictions with it). At the end of the `with`, the tensors still alive are pinned (as the trace
    format pins the outputs referenced at the end) and the constants written get their new bytes."""

    def __init__(self, budget_bytes: float = math.inf, policy: str | Policy = DEFAULT_POLICY,
                 clock: str = LOGICAL, plan: Sequence[Instruction] | None = None,
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
        planned = make_plan(plan) if plan is not None else None
        self.plan = planned.instructions if planned is not None else None
        self._after_op = after_op
        self.namer = Namer(own_releases=plan is None)
        self.lowering = Lowering("<live step>")
        runtime = get_runtime(DEFAULT_RUNTIME)
        compiled = planned is not None and cengine.supports(self.policy, runtime, planned.program)
        if engine == "c" and not compiled:
            raise UsageError("the compiled engine follows only a plan, with a policy it runs (not built, "
                             "no plan, or a policy written as a Python function)")
        if compiled and engine != "python":
            self.engine = cengine.Follower(planned.program, self.lowering.builder.steps, self, budget_bytes,
                                           self.policy, runtime, seed, fixed_costs=clock == LOGICAL)
        else:
            self.engine = Engine.follow(self.lowering.builder, self, budget_bytes, self.policy, runtime, seed)
        self.engine_name = "c" if isinstance(self.engine, cengine.Follower) else "python"
        self.values: list[torch.Tensor | None] = []  # per engine tensor: its value, or None
        self.windows: list = []  # per engine tensor: its window on its storage (set when first made)
        self.recipes: list[Recipe] = []  # per engine operator
        self._fed = 0  # instructions of the source (the plan, or the namer's) lowered so far
        self._checked = 0  # the namer's instructions compared with the plan's so far
        self._plan_cmp = 0  # the plan's instructions those were compared with
        self._constants: dict[str, torch.Tensor] = {}  # constant name -> the caller's tensor
        self._dispatch: _Dispatch | None = None
        self._open = False
        self.finished = False
        self.replays = 0
        self.unplanned_remats = 0  # replays for operators the trace does not have (reading a value)
        self.evicted: list[int] = []  # storages the policy evicted, in order
        # The most bytes of an operator's new tensors that existed before the engine made room for
        # them: unplanned, every operator's; planned, only the results of an operator that also
        # writes (the trace's CALL after its MUTATE makes room once the operator has run).
        self.early_bytes = 0

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
        return self.namer.operators

    def constant_bytes(self) -> dict[int, int]:
        """The constants' storages: data pointer -> bytes."""
        return {data_ptr(t): t.untyped_storage().nbytes() for t in self._constants.values()}

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
        name = self.namer.name(t)
        return None if name is None else self.lowering.bound.get(name)

    # --- the mode --------------------------------------------------------------------------
    def __enter__(self):
        if self._open or self.finished:
            raise UsageError("a LiveSession runs one step: make a new one for the next")
        self._open = True
        self.namer.start()
        self._sync_source()
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb):
        result = super().__exit__(exc_type, exc, tb)
        try:
            if exc_type is None:
                with _disable_current_modes():
                    self._finish()
        finally:
            self._open = False
            self.finished = True
            self.namer.stop()
        return result

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.dispatch(func, args, kwargs or {})

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
                s._guarded(lambda: s.engine.materialize(tid))
                s.unplanned_remats += 1
        return s.values[tid]

    # --- feeding the engine ----------------------------------------------------------------
    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except OutOfMemory as exc:
            raise LiveBudgetError(self._why_stuck(exc.args[0])) from None

    def _sync_source(self) -> None:
        """Lower what the namer wrote since the last call and let the engine follow. Planned, the
        namer's instructions are checked against the plan and the plan's are lowered."""
        if self.plan is not None:
            self._check()
            self._feed(self.plan, self._plan_cmp)
        else:
            self._feed(self.namer.out, len(self.namer.out))
        self._guarded(self.engine.step)

    def _check(self) -> None:
        """The namer's instructions since the last check against the plan's, RELEASEs aside (the
        plan's say when a name dies: the Namer's docstring says why), and annotations (a trace
        read from a file keeps none before its START)."""
        out, plan = self.namer.out, self.plan
        k, j = self._checked, self._plan_cmp
        while k < len(out):
            x = out[k]
            k += 1
            if isinstance(x, _UNCHECKED):
                continue
            while j < len(plan) and isinstance(plan[j], _UNCHECKED):
                j += 1
            if j >= len(plan) or not _same(x, plan[j]):
                want = plan[j] if j < len(plan) else "the end of the plan"
                raise PlanMismatch(f"the step differs from its plan at the plan's instruction {j + 1}: "
                                   f"{x} here, {want} in the plan")
            j += 1
        self._checked, self._plan_cmp = k, j

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
                else:
                    low.call(x, sizes, aliases)
                    self._recipe(self._aten_recipe(CALL))
            elif isinstance(x, Mutate):
                low.mutate(x)
                self._recipe(self._aten_recipe(MUTATE))
            elif isinstance(x, Constant):
                mem = source[i]
                i += 1
                low.constant(x, mem.size_bytes)
                self._recipe(Recipe(CONSTANT, [], constant=self._constants[x.name]))
            elif isinstance(x, Release):
                low.release(x)
                if self.plan is not None:
                    self.namer.release(x.name)
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

    def _aten_recipe(self, kind: str) -> Recipe:
        d = self._dispatch
        if d is None:
            raise PlanMismatch(f"the plan has an operator here ({self.lowering.builder.op_names[-1]}) "
                               f"that the step does not run")
        return d.recipe(kind, self._args_of_last())

    # --- the executor (the engine calls these) ------------------------------------------------
    def compute(self, op: int, tensors: list[int], remat: bool) -> int:
        """Give `tensors` (outputs of operator `op`) values: a first run, or a replay. Returns the
        run's cost on the session's clock."""
        r = self.recipes[op]
        start = self.lowering.builder.op_out_start[op]
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
                self._run_first(d, r)
                measured = d.run.elapsed_ns
                if r.kind == MUTATE:
                    self._early(d.run.results)
            run = d.run  # else it ran already: its instructions carry the time (the first of them)
        for t in tensors:
            k = t - start
            self._set(t, run.passed[r.written[k]] if r.kind == MUTATE else run.results[k])
        if self.clock == MEASURED and measured is not None:
            return measured
        return self.lowering.builder.op_cost[op]

    def drop(self, storage: int, by_policy: bool) -> None:
        """The engine evicted `storage`: its tensors' values go."""
        if by_policy:
            self.evicted.append(storage)
        values = self.values
        for t in self.engine.storage_tensors(storage):
            if t < len(values):
                values[t] = None

    def _set(self, t: int, v: torch.Tensor) -> None:
        self.values[t] = v
        if self.windows[t] is None:
            self.windows[t] = window_of(v)

    def _why_stuck(self, need_bytes: int) -> str:
        residents = self.engine.residents()
        pinned = [(s, size) for s, size, pin, _ in residents if pin]
        locked = [(s, size) for s, size, _, lock in residents if lock]
        return (f"the budget of {self.budget_bytes:.0f} bytes cannot be met: {self.engine.memory} bytes "
                f"resident and {need_bytes} more needed; "
                f"pinned: {sum(size for _, size in pinned)} bytes in {len(pinned)} constants; "
                f"locked by the operator in flight: {sum(size for _, size in locked)} bytes in storages "
                f"{', '.join(str(s) for s, _ in locked[:8])}{' ...' if len(locked) > 8 else ''}")

    # --- the first run of an operator ----------------------------------------------------------
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

    def dispatch(self, func, args, kwargs):
        if not self._open:
            return self._outside(func, args, kwargs)
        reason = _refused(func)
        if reason:
            raise UsageError(reason)
        namer = self.namer
        with namer.lock, _disable_current_modes():
            namer.flush()
            flat, spec = tree_flatten((args, kwargs))
            flat = [self.value(x) if isinstance(x, LiveTensor) and x._session is not self else x for x in flat]
            inputs = [x for x in flat if isinstance(x, torch.Tensor)]
            namer.mark_backward()
            arg_names = [self._name(x) for x in inputs]
            written = written_tensors(func, *tree_unflatten(flat, spec))
            mutated = [next(j for j, t in enumerate(inputs) if t is w) for w in written]
            rng = rng_state(flat) if torch.Tag.nondeterministic_seeded in func.tags else None
            d = _Dispatch(func, flat, spec, inputs, arg_names, mutated, rng)
            self._sync_source()
            self._dispatch = d
            try:
                if self.plan is not None and self._planned(d):
                    self._guarded(self.engine.step)  # the first run happens in `compute`
                else:
                    self._unplanned(d)
                result = self._returned(d)
            finally:
                self._dispatch = None
        if self._after_op is not None:
            self._after_op(self)
        return result

    def _planned(self, d: _Dispatch) -> bool:
        """Lower the plan's instructions of this operator (releases the recorder saw during it
        first); False if the plan has none here (an operator that neither makes nor writes)."""
        plan, name = self.plan, str(d.func)
        j = self._fed
        while j < len(plan) and isinstance(plan[j], _UNCHECKED):
            j += 1
        first = plan[j] if j < len(plan) else None
        if not (isinstance(first, (Call, Mutate)) and first.name == name and list(first.args) == d.arg_names):
            return False
        j += 1
        if isinstance(first, Mutate):
            while j < len(plan) and isinstance(plan[j], Call) and plan[j].name == REBIND_OP:
                j += 4  # CALL, MEMORY, ALIAS, RELEASE
            nxt = plan[j] if j < len(plan) else None
            if isinstance(nxt, Call) and nxt.name == name and nxt.time_ns == 0:
                j += 1 + 2 * len(nxt.results)
        else:
            j += 2 * len(first.results)
        self._feed(plan, j)
        return True

    def _unplanned(self, d: _Dispatch) -> None:
        """Arguments made resident and locked, the operator run, then its instructions lowered
        and taken. An operator a plan does not have (it neither makes nor writes) is run on its
        arguments as they are when all are resident, so the planned schedule is not disturbed."""
        e = self.engine
        args = [self.lowering.bound[n] for n in d.arg_names]
        quiet = self.plan is not None and all(self.values[a] is not None for a in args)
        if not quiet:
            self._guarded(lambda: e.prepare(args))
            if self.plan is not None:
                self.unplanned_remats += 1
        self._run_first(d, None)  # planned, an operator with results or writes is a mismatch here
        self._early([*d.run.results, *(d.run.passed[i] for i in d.mutated)])
        if self.plan is not None:
            if not quiet:
                self._guarded(lambda: e.finish(args, None))
            return
        first_op = len(self.recipes)
        self._feed(self.namer.out, len(self.namer.out))
        op = next((o for o in range(first_op, len(self.recipes)) if self.recipes[o].kind in (CALL, MUTATE)), None)
        self._guarded(lambda: e.finish(args, op))

    def _early(self, tensors) -> None:
        self.early_bytes = max(self.early_bytes, sum(t.untyped_storage().nbytes() for t in tensors))

    def _run_first(self, d: _Dispatch, r: Recipe | None) -> None:
        """The operator's one first run, on its arguments' values; the namer writes its instructions
        (checked against the plan when there is one)."""
        recipe = r or d.recipe(CALL, [self.lowering.bound[n] for n in d.arg_names])
        values = [self.values[a] for a in recipe.args]
        d.run = run = execute(recipe, values, replay=False)
        d.wrappers = [LiveTensor(self, v) for v in run.results]
        results = []
        for w, v in zip(d.wrappers, run.results):
            ptr = data_ptr(v)
            same = next((k for k, p in enumerate(run.passed) if ptr and data_ptr(p) == ptr), None)
            key = self.namer.key_of(d.arg_names[same]) if same is not None else self.namer.fresh_key()
            results.append((w, key, v.untyped_storage().nbytes()))
        cost = run.elapsed_ns if self.clock == MEASURED else 1
        self.namer.flush()
        self.namer.emit(str(d.func), d.arg_names, d.mutated, results, cost)
        if self.plan is not None:
            self._check()

    def _returned(self, d: _Dispatch):
        """What the operator returns to its caller: its own objects for what it was given (an
        in-place operator's `self`), the wrappers for its results."""
        run = d.run
        wrapper_of = {id(v): w for v, w in zip(run.results, d.wrappers)}
        out = []
        for v in run.out_flat:
            if isinstance(v, torch.Tensor):
                k = next((k for k, p in enumerate(run.passed) if v is p), None)
                v = d.inputs[k] if k is not None else wrapper_of[id(v)]
            out.append(v)
        return tree_unflatten(out, run.out_spec)

    def _outside(self, func, args, kwargs):
        """An operator on live tensors outside their session's step: it runs on their values."""
        flat, spec = tree_flatten((args, kwargs))
        with _disable_current_modes():
            a, k = tree_unflatten([self.value(x) if isinstance(x, LiveTensor) else x for x in flat], spec)
            return func(*a, **k)

    # --- the end of the step --------------------------------------------------------------
    def _finish(self) -> None:
        """Pin what is still alive (the trace's final PINs), then copy each written constant's final
        version into the caller's tensor."""
        self.namer.flush()
        self._sync_source()
        if self.plan is not None:
            rest = [x for x in self.plan[self._plan_cmp:] if not isinstance(x, _UNCHECKED)]
            if rest:
                raise PlanMismatch(f"the step ended before its plan did: {rest[0]} and {len(rest) - 1} more "
                                   f"instructions are not run")
            self._feed(self.plan, len(self.plan))
        self.lowering.pin_outputs()
        self._guarded(self.engine.step)
        done: set[int] = set()
        for name, t in self._constants.items():
            tid = self.lowering.bound[name]
            original = self.recipes[self.lowering.builder.t_op[tid]]
            if original.kind == CONSTANT and original.constant is t:
                continue  # not written in the step
            ptr = data_ptr(t)
            if ptr in done:
                continue
            done.add(ptr)
            v = self.values[tid]
            t.untyped_storage().copy_(v.untyped_storage())
