"""The live session: every aten operator of a PyTorch step, below autograd, under a memory budget.

Owns dispatch (wrapping results in LiveTensor), replay (with an explicit stack), the rules for
views, in-place writes and random operators, eviction, the byte count and the clock. Which storage
to evict is the simulator's policy's choice (scoring.py), over the pool kept as the engine keeps it
(a storage joins when made or unlocked, leaves when locked or evicted); costs come from a clock
(clocks.py).

The rules (docs/live.md says why each is sound):
- Storage is the unit: a result sharing an argument's storage is a view of it (no new bytes);
  evicting a storage drops the value of every tensor on it; a view comes back by replaying its
  view operator on its (rematerialized) base.
- A write to a storage made in the step is copy-on-write, as the trace format's MUTATE: the
  operator runs on a copy of the storage's bytes, the copy becomes the storage's new version and
  every live tensor on the old version is rebound to the same window on the new one; the old
  version stays for the recipes that read it (and, with no tensor left on it, is evicted).
- A write to a constant (parameter, buffer, input: a tensor made outside the step) happens in
  place, on the caller's tensor; the old bytes are kept as a snapshot, a pinned constant, so a
  recipe that read them replays exactly. A replay that writes gets scratch copies to write.
- A random operator keeps the generator's state from before it ran; a replay restores it.
- Operators that change a tensor's own metadata in place (`transpose_`, `resize_`, `set_`) are
  refused: a wrapper's shape is fixed when it is made.
"""

from __future__ import annotations

import math
import time
import weakref
from typing import Callable, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..capture.schema import written_tensors
from ..defaults import DEFAULT_POLICY
from ..errors import DtrlabError, UsageError
from ..sim.policies import Policy
from .clocks import Clock, UnitClock
from .graph import Call, Handle, Record, Storage
from .scoring import Chooser


class LiveBudgetError(DtrlabError):
    """The budget cannot be met: everything resident is pinned (constants) or locked (in use)."""


def _refused(func) -> str | None:
    if torch.Tag.inplace_view in func.tags or func._schema.name in ("aten::set_", "aten::resize_"):
        return f"{func} changes a tensor's shape or storage in place, which the live runtime cannot replay"
    return None


def _cuda_devices(flat) -> list[int]:
    return sorted({x.device.index or 0 for x in flat if isinstance(x, torch.Tensor) and x.device.type == "cuda"})


def _get_rng(flat) -> tuple:
    """The default generators' states (the CPU's, and each CUDA device's the operator touches)."""
    return torch.get_rng_state(), {d: torch.cuda.get_rng_state(d) for d in _cuda_devices(flat)}


def _set_rng(state: tuple) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    for d, st in cuda.items():
        torch.cuda.set_rng_state(st, d)


def _ptr(t: torch.Tensor) -> int:
    """The data pointer of a tensor's storage, or 0 for an empty one (it shares nothing)."""
    s = t.untyped_storage()
    return s.data_ptr() if s.nbytes() > 0 else 0


class LiveTensor(torch.Tensor):
    """A wrapper below autograd: metadata only; the value lives in the session's record."""

    @staticmethod
    def __new__(cls, session: "LiveSession", handle: Handle):
        r = handle.record
        t = torch.Tensor._make_wrapper_subclass(cls, r.shape, strides=r.stride, storage_offset=r.offset,
                                                dtype=r.dtype, device=r.device, requires_grad=False)
        t._session = session
        t._handle = handle
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        flat, _ = tree_flatten((args, kwargs))
        session = next(x._session for x in flat if isinstance(x, LiveTensor))
        return session.dispatch(func, args, kwargs or {})

    def __repr__(self) -> str:
        r = self._handle.record
        state = "resident" if r.storage.resident else "evicted"
        return f"LiveTensor(shape={tuple(r.shape)}, dtype={r.dtype}, storage={r.storage.id}, {state})"


class LiveSession(TorchDispatchMode):
    """Run a step inside `with session:`; results are LiveTensors, `value(t)` reads one.

    policy: any policy the simulator takes (sim.policies.get_policy); clock: what an operator costs
    (clocks.py; default: every run costs 1); seed: the random policy's.
    after_op: called after every operator's first run (tests use it to force evictions)."""

    def __init__(self, budget_bytes: float = math.inf, policy: str | Policy = DEFAULT_POLICY,
                 clock: Clock | None = None, after_op: Callable[["LiveSession"], None] | None = None,
                 seed: int = 0) -> None:
        super().__init__()
        self.budget_bytes = budget_bytes
        self.chooser = Chooser(policy, seed)
        self.clock = clock or UnitClock()
        self._after_op = after_op
        # id(caller's tensor) -> (the tensor, its record); holding the tensor keeps the id unique
        self._constants: dict[int, tuple[torch.Tensor, Record]] = {}
        self._constant_storages: dict[int, Storage] = {}  # data pointer -> the caller's storage
        self._snapshots: list[Storage] = []  # old bytes of constants written in place, pinned
        self._resident: dict[int, Storage] = {}  # resident storages made in the step
        self._pool: dict[int, Storage] = {}  # the evictable ones, in the engine's pool order
        self._made: list[Storage] = []  # storages the first run in flight made (not yet in the pool)
        self._handles: dict[int, Handle] = {}  # live wrappers' handles by creation serial
        self._released: list[Handle] = []  # handles of wrappers that died, handled between operators
        self._next_id = 0
        self.resident_bytes = 0
        self.peak_bytes = 0
        self.clock_ns = 1  # the engine's clock starts at 1 too
        self.remat_ns = 0  # clock spent on replays
        self.operators = 0  # first runs
        self.replays = 0
        self.evictions = 0  # chosen to meet the budget
        self.eager_evictions = 0  # storages whose last live tensor died
        self.evicted: list[int] = []  # storage ids, in the order the budget evicted them

    # --- the mode ------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.dispatch(func, args, kwargs or {})

    def value(self, t: torch.Tensor) -> torch.Tensor:
        """The plain tensor behind `t` (rematerialized if evicted); a plain tensor is itself."""
        if not isinstance(t, LiveTensor):
            return t
        self._flush()
        r = t._handle.record
        with _disable_current_modes():  # called inside the step too: replays run plain operators
            for s in self._ensure(Call(None, None, [r], (), None)):
                self._unlock(s)
        return r.value

    def pin_outputs(self) -> None:
        """After the step: bring back every tensor still alive, in creation order, and keep it (as
        the trace format pins the outputs still referenced at the end, rematerializing them)."""
        self._flush()
        with _disable_current_modes():
            for _, h in sorted(self._handles.items()):
                self._ensure(Call(None, None, [h.record], (), None))  # its locks are kept: pinned

    def storages(self) -> Iterable[Storage]:
        """Every storage the session holds bytes for (resident ones made in the step, constants)."""
        yield from self._resident.values()
        yield from self._constant_storages.values()
        yield from self._snapshots

    # --- storages and records --------------------------------------------------------------
    def _storage(self, nbytes: int, constant: bool) -> Storage:
        self._next_id += 1
        s = Storage(self._next_id, nbytes, constant)
        self.resident_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes)
        if not constant:
            self._resident[s.id] = s
            self._made.append(s)
        return s

    def _constant(self, t: torch.Tensor) -> Record:
        entry = self._constants.get(id(t))
        if entry is not None:
            return entry[1]
        ptr = _ptr(t)
        s = self._constant_storages.get(ptr) if ptr else None
        if s is None:
            s = self._storage(t.untyped_storage().nbytes(), True)
            if ptr:
                self._constant_storages[ptr] = s
        r = Record(s, t)
        if s.root is None:
            s.root = r
        self._constants[id(t)] = (t, r)
        return r

    def _wrap(self, r: Record) -> LiveTensor:
        h = Handle(r, self._next_id)
        self._next_id += 1
        self._handles[h.serial] = h
        r.storage.handles.add(h)
        w = LiveTensor(self, h)
        weakref.finalize(w, self._released.append, h)
        return w

    def _rebind(self, h: Handle, s: Storage) -> None:
        """Point a live wrapper at the same window on storage `s` (a new version of its own)."""
        h.record.storage.handles.discard(h)
        h.record = Record(s, h.record.like(s.root.value.untyped_storage()), window=True)
        s.handles.add(h)

    def _flush(self) -> None:
        while self._released:
            h = self._released.pop()
            del self._handles[h.serial]
            s = h.record.storage
            s.handles.discard(h)
            if not s.handles and not s.constant and s.resident:
                self._evict(s, by_budget=False)

    # --- eviction ------------------------------------------------------------------------
    def _lock(self, s: Storage) -> None:
        if s.locks == 0:
            self._pool.pop(s.id, None)
        s.locks += 1

    def _unlock(self, s: Storage) -> None:
        s.locks -= 1
        if s.locks == 0 and s.id in self._resident:
            self._pool[s.id] = s

    def _evict(self, s: Storage, by_budget: bool) -> None:
        for r in s.records:
            r.value = None
        del self._resident[s.id]
        self._pool.pop(s.id, None)
        self.resident_bytes -= s.nbytes
        if by_budget:
            self.evictions += 1
            s.evictions += 1
            self.evicted.append(s.id)
        else:
            self.eager_evictions += 1

    def evict(self, s: Storage) -> None:
        """Evict a storage now (it must be resident, made in the step and not locked)."""
        if s.constant or s.locks or s.id not in self._resident:
            raise ValueError(f"{s} is not evictable")
        self._evict(s, by_budget=True)

    def evictable(self) -> list[Storage]:
        """The pool: resident, unlocked storages made in the step, in the order the engine keeps."""
        return list(self._pool.values())

    def _make_room(self, need_bytes: int) -> None:
        while self.resident_bytes + need_bytes > self.budget_bytes:
            if not self._pool:
                raise LiveBudgetError(self._why_stuck(need_bytes))
            choice = self.chooser.choose(self.evictable(), self.clock_ns, self.budget_bytes,
                                         self.resident_bytes + need_bytes)
            self._evict(choice, by_budget=True)

    def _why_stuck(self, need_bytes: int) -> str:
        pinned = [s for s in self.storages() if s.constant]
        locked = [s for s in self._resident.values() if s.locks]
        return (f"the budget of {self.budget_bytes:.0f} bytes cannot be met: {self.resident_bytes} bytes resident "
                f"and {need_bytes} more needed; pinned: {sum(s.nbytes for s in pinned)} bytes in "
                f"{len(pinned)} constants; locked by the operator in flight: "
                f"{sum(s.nbytes for s in locked)} bytes in storages "
                f"{', '.join(str(s.id) for s in locked[:8])}{' ...' if len(locked) > 8 else ''}")

    # --- replay --------------------------------------------------------------------------
    def _ensure(self, call: Call) -> list[Storage]:
        """Give every record `call` reads a value, replaying what was evicted; lock their storages.

        An explicit stack, not recursion (rematerialization chains are deep): a frame is
        [call, next record, storages it locked]. Returns the storages locked for `call`."""
        self._touch(call)
        stack: list[list] = [[call, 0, []]]
        while True:
            frame = stack[-1]
            c, i, locked = frame
            if i < len(c.records):
                r = c.records[i]
                if r.value is None and r.window and r.storage.resident:
                    r.value = r.like(r.storage.root.value.untyped_storage())
                if r.value is None:
                    producer = (r.storage.root if r.window else r).call
                    if any(f[0] is producer for f in stack):
                        raise AssertionError(f"a recipe that reads itself: {producer.func}")
                    self._touch(producer)
                    stack.append([producer, 0, []])
                    continue
                self._lock(r.storage)
                locked.append(r.storage)
                frame[1] = i + 1
                continue
            if c is call:
                return locked
            self._replay(c)
            for s in locked:
                self._unlock(s)
            stack.pop()

    def _touch(self, call: Call) -> None:
        """A call about to run: its arguments' storages were used now (the engine's last access)."""
        if call.func is not None:
            for r in call.records:
                r.storage.last_access_ns = self.clock_ns

    def _replay(self, call: Call) -> None:
        outs = [o() if o is not None else None for o in call.outputs]
        roots = {sid: ref() for sid, ref in call.new_roots.items()}
        produced = {r.storage.id: r.storage for r in outs if r is not None and r.storage.root is r}
        produced.update((r.storage.id, r.storage) for r in roots.values() if r is not None)
        made = {sid: s for sid, s in produced.items() if not s.resident}  # what this replay brings back
        self._make_room(sum(s.nbytes for s in made.values()))
        flat, _, scratch, elapsed_ns = self._execute(call, [x.value if isinstance(x, Record) else x
                                                            for x in call.leaves], replay=True)
        cost_ns = self.clock.replay(call.cost, elapsed_ns)
        self.clock_ns += cost_ns
        self.remat_ns += cost_ns
        self.replays += 1
        for sid, r in roots.items():
            if r is not None and r.storage.id in made:
                r.value = r.like(scratch[sid])
        for r, v in zip(outs, flat):
            if r is None or r.value is not None:
                continue
            sid = r.storage.id
            # A result on a storage this call makes is kept only if this replay brought it
            # back; a view of an argument is a view of that argument's current bytes.
            if sid in made or (sid not in produced and r.storage.resident):
                r.value = v
        for s in made.values():
            s.remats += 1
            self.resident_bytes += s.nbytes
            self._resident[s.id] = s
            if s.locks == 0:
                self._pool[s.id] = s
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes)

    def _execute(self, call: Call, values: list, replay: bool):
        """Run the call's operator on `values` (its leaves). Writes go to scratch copies of the
        storages written, except a constant's on the first run, which is written in place.
        Returns the flattened outputs, their spec, the scratch bytes by storage id and the elapsed ns."""
        scratch: dict[int, torch.UntypedStorage] = {}
        for pos in call.mutated:
            s = call.leaves[pos].storage
            if (replay or not s.constant) and s.id not in scratch:
                scratch[s.id] = s.root.value.untyped_storage().clone()
        if scratch:
            for pos, r in enumerate(call.leaves):
                if isinstance(r, Record) and r.storage.id in scratch:
                    values[pos] = r.like(scratch[r.storage.id])
        args, kwargs = tree_unflatten(values, call.spec)
        if call.rng is None or not replay:
            start_ns = time.perf_counter_ns()
            out = call.func(*args, **kwargs)
            elapsed_ns = time.perf_counter_ns() - start_ns
        else:
            with torch.random.fork_rng(devices=list(call.rng[1])):
                _set_rng(call.rng)
                start_ns = time.perf_counter_ns()
                out = call.func(*args, **kwargs)
                elapsed_ns = time.perf_counter_ns() - start_ns
        flat, spec = tree_flatten(out)
        return flat, spec, scratch, elapsed_ns

    # --- the first run of an operator ------------------------------------------------------
    def dispatch(self, func, args, kwargs):
        self._flush()
        reason = _refused(func)
        if reason:
            raise UsageError(reason)
        flat, spec = tree_flatten((args, kwargs))
        leaves = [x._handle.record if isinstance(x, LiveTensor) else
                  self._constant(x) if isinstance(x, torch.Tensor) else x for x in flat]
        written = written_tensors(func, args, kwargs)
        mutated = tuple(i for i, x in enumerate(flat) if any(x is w for w in written))
        rng = _get_rng(flat) if torch.Tag.nondeterministic_seeded in func.tags else None
        call = Call(func, spec, leaves, mutated, rng)
        locked = self._ensure(call)
        written_constants = {}
        for p in mutated:
            if leaves[p].storage.constant:
                written_constants[leaves[p].storage.id] = leaves[p].storage
        for s in written_constants.values():
            self._snapshot(s)
        # The caller's own tensors for constants (a constant's write goes to them), else the records'.
        values = [x if isinstance(x, torch.Tensor) and not isinstance(x, LiveTensor) else
                  r.value if isinstance(r, Record) else x for x, r in zip(flat, leaves)]
        out_flat, out_spec, scratch, elapsed_ns = self._execute(call, values, replay=False)
        self.operators += 1
        # Would the trace recorder write this operator (a result that is no argument, or a write)?
        recorded = bool(mutated) or any(isinstance(v, torch.Tensor) and not any(v is x for x in values)
                                        for v in out_flat)
        call.cost = self.clock.first_run(str(func), bool(mutated), elapsed_ns, recorded)
        self._made = []
        result = tree_unflatten(self._results(call, flat, values, out_flat, scratch, written_constants), out_spec)
        # As the engine: room is made with the arguments locked and before the results join the
        # pool, on the clock before the operator; then its results join, then its arguments.
        self._make_room(0)
        self.clock_ns += call.cost.total_ns
        for s in self._made:
            if s.locks == 0 and s.id in self._resident:
                self._pool[s.id] = s
        for s in locked:
            self._unlock(s)
        for o in call.outputs:
            r = o() if o is not None else None
            if r is not None:
                r.storage.last_access_ns = self.clock_ns
        for ref in call.new_roots.values():
            if ref() is not None:
                ref().storage.last_access_ns = self.clock_ns
        if self._after_op is not None:
            self._after_op(self)
        return result

    def _charge(self, call: Call, s: Storage, cost_ns: int) -> None:
        """Storage `s` gets a tensor from `call`: its cost counts in s's compute, its arguments'
        storages become s's parents (the graph a policy's e* is traversed on)."""
        s.compute_ns += cost_ns
        for r in call.records:
            p = r.storage
            if p is not s:
                s.parents[p.id] = p
                p.children[s.id] = s

    def _snapshot(self, s: Storage) -> None:
        """Before a constant is written in place: its records move to a pinned copy of its bytes
        (the recipes that read them replay exactly); the caller's tensors get new records."""
        snap = self._storage(s.nbytes, True)
        raw = s.root.value.untyped_storage().clone()
        for r in s.records:
            r.storage = snap
            r.value = r.like(raw)
        snap.records, s.records = s.records, []
        snap.root, s.root = s.root, None
        self._snapshots.append(snap)
        for tid, (t, r) in list(self._constants.items()):
            if r.storage is snap:
                fresh = Record(s, t)
                s.root = s.root or fresh
                self._constants[tid] = (t, fresh)
        for h in list(s.handles):  # live wrappers on the constant see its new bytes, as in PyTorch
            self._rebind(h, s)

    def _results(self, call: Call, flat, values, out_flat, scratch, written_constants) -> list:
        """The wrappers (or the caller's own objects) to return, and the call's records of them."""
        # A storage made in the step and written here gets its new version first: its live
        # wrappers move there, and results may be views of it.
        new: dict[int, Storage] = {}
        for pos in call.mutated:
            old = call.leaves[pos].storage
            if old.id in scratch and old.id not in new:
                s = self._storage(old.nbytes, False)
                self._charge(call, s, call.cost.mutate_ns)
                s.root = Record(s, old.root.like(scratch[old.id]), call, -1)
                call.new_roots[old.id] = weakref.ref(s.root)
                new[old.id] = s
                for h in list(old.handles):
                    self._rebind(h, s)
                if old.resident:
                    self._evict(old, by_budget=False)  # no live tensor is left on the old version
        by_ptr: dict[int, Storage] = {}
        for x, v, r in zip(flat, values, call.leaves):
            if isinstance(r, Record) and _ptr(v):
                st = r.storage if isinstance(x, LiveTensor) else self._constant(x).storage
                by_ptr.setdefault(_ptr(v), new.get(st.id, st))
        out, outputs = [], []
        charged = set(s.id for s in new.values())  # each call counts once per storage, as the engine's
        for j, v in enumerate(out_flat):
            if not isinstance(v, torch.Tensor):
                out.append(v)
                outputs.append(None)
                continue
            same = next((k for k, x in enumerate(values) if x is v), None)
            if same is not None:  # an in-place operator's `self`, or `out=`: the caller's own object
                out.append(flat[same])
                outputs.append(None)
                continue
            ptr = _ptr(v)
            s = by_ptr.get(ptr) if ptr else None
            if s is not None and s.id in written_constants:
                r = Record(s, v, window=True)  # a view of a constant written in place: its new bytes
            elif s is not None:
                if s.id not in charged:
                    charged.add(s.id)
                    self._charge(call, s, call.cost.call_ns)
                r = Record(s, v, call, j)
            else:
                s = self._storage(v.untyped_storage().nbytes(), False)
                charged.add(s.id)
                self._charge(call, s, call.cost.call_ns)
                r = Record(s, v, call, j)
                s.root = r
                if ptr:
                    by_ptr[ptr] = s
            outputs.append(weakref.ref(r))
            out.append(self._wrap(r))
        call.outputs = outputs
        return out
