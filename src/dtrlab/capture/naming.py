"""Trace names for a running step's tensors, and the instructions each operator becomes.

Owns the one mapping from tensors to trace instructions, shared by the trace recorder
(recorder.py) and the live runtime (live/session.py), so a live step's instructions are its
capture's, line for line: CONSTANT for a tensor made outside the step, CALL with MEMORY and ALIAS
for an operator's new tensors, MUTATE for its writes, RELEASE when a tensor dies; a tensor made
outside the step on a storage some name already holds is a CALL of VIEW_OP, an alias of that name
at no cost (never a second CONSTANT: the storage counts once, as PyTorch holds it once).

How a tensor's last reference is seen: each tensor named gets a weakref.finalize. PyTorch keeps
one Python object per TensorImpl and preserves it while C++ still holds the TensorImpl
(autograd's saved tensors, the graph), so the finalizer runs when the tensor itself dies, not
when Python code drops its last name for it: a saved activation is released after the backward
operator that used it, as in the DTR paper's instrumented PyTorch. Finalizers only queue the
release; `flush` turns the queue into RELEASE lines between operators (never inside a CALL's
MEMORY/ALIAS group) and updates the byte count there, before any new storage is counted.

Who says when a name dies: the namer itself (its finalizers), or, for the live runtime following a
plan, the plan (`own_releases=False`): the plan's RELEASEs are then told with `release`, and a name
whose tensor died sooner stays until the plan releases it. A tensor subclass's view keeps the
tensor it was taken of alive while it lives, where a plain view holds only the root (measured;
most likely the view-replay function PyTorch keeps for a subclass's views holds it). So a live
step's own releases of such views come later than a plain capture's.

Storages are told apart by a key (the recorder's: the data pointer; the live runtime's: its own).
Bytes are counted on keys: a storage is live while some named tensor on it is, and counts its
nbytes once; `peak_bytes` is the most live at once.

A write through one tensor is seen by every tensor on its storage (PyTorch's views). The trace
format's MUTATE makes a new version for the written name only; so after a MUTATE every other
named tensor on a written storage is rebound to the same window on the new version: a CALL of
REBIND_OP on the written name, an ALIAS of it, at no cost, and a RELEASE of the old name. The old
version then has no name left, as in PyTorch, where it is gone.

A constant's storage is held by its owner (the model, the optimizer, the caller) for the whole
step, and the engines keep it: a CONSTANT is pinned, and a live step keeps the caller's storage and
writes into a copy. But the baseline that ratios are of (the reference's unconstrained run, which
banishes) frees a pinned storage once its last name is released, which a constant's is when it is
written (MUTATE releases the old version: an optimizer's update of a parameter or of its state,
batch norm's running statistics, a gradient accumulated in place) or dropped (a gradient set to
None). So before the first such write or RELEASE, the namer writes a COPY of the constant (the
owner's reference, never released): every run, unbounded or not, then keeps the storage, and the
baseline's peak is the engines' unbounded peak.
"""

from __future__ import annotations

import collections
import gc
import threading
import weakref

import torch

from ..trace.read import BACKWARD, START, Alias, Annotate, Call, Constant, Copy, Instruction, Memory, Mutate, Release

REBIND_OP = "dtrlab.rebind"  # a tensor moved to the new version of the storage it shares with a written one
VIEW_OP = "dtrlab.view"  # a tensor made outside the step on a storage a name already holds (not a CONSTANT)


def replay_views(on: bool) -> bool:
    """Turn autograd's view replay on or off for this thread; returns what it was. The recorder and
    the live runtime both record and run a step with it on, so PyTorch treats the step's views
    alike under both: a view of a tensor subclass (the live runtime's wrappers) always keeps a
    function that replays its view operator, and after a write through the view autograd replays
    it (on the base, for the view's new grad_fn; on the gradient, in the backward pass) where a
    plain view gets as_strided. With replay on, a plain view does the same: one operator stream."""
    was = torch._C._is_view_replay_enabled()
    torch._C._set_view_replay_enabled(on)
    return was


def storage_of(t: torch.Tensor) -> tuple[int, int]:
    """(data pointer, nbytes) of a tensor's untyped storage; (0, 0) when it has none."""
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested and other storage-less tensors
        return 0, 0
    return s.data_ptr(), s.nbytes()


class Namer:
    """Names tensors and writes the instructions of the operators it is told of (`emit`)."""

    def __init__(self, own_releases: bool = True) -> None:
        self.own_releases = own_releases
        self.out: list[Instruction] = []
        self._names: dict[int, str] = {}  # id(tensor) -> name, for live named tensors
        self._key_of: dict[str, int] = {}  # name -> storage key
        self._on_key: dict[int, dict[str, None]] = {}  # storage key -> its live names, in naming order
        self._storages: dict[int, list[int]] = {}  # storage key -> [nbytes, live named tensors]
        self._finalizers: dict[str, weakref.finalize] = {}
        # Finalizers may run inside an operator, in our own code or on autograd's device
        # threads: they only append here (atomic), and flush does the rest between operators.
        self._pending: collections.deque[tuple[int, str]] = collections.deque()
        self.lock = threading.RLock()
        self._counter = 0
        self._fresh_keys = 0  # storages of 0 bytes share pointer 0: each gets its own key
        self.live_bytes = self.peak_bytes = 0
        self.mutated_bytes = self.unattributed = self.operators = self.skipped_ns = 0
        self.rebinds = 0
        self._constant_keys: set[int] = set()  # storages a CONSTANT was named on
        self._held: set[int] = set()  # of those, the ones whose owner's COPY is written
        self._backward = False
        self._open = False

    # --- the step -----------------------------------------------------------------------
    def start(self) -> None:
        """The step begins. The cycle collector is off until `stop`: a tensor in a reference cycle
        would otherwise be released wherever a collection happened to run, differently each time."""
        self._open = True
        self._gc_was_on = gc.isenabled()
        gc.disable()
        self.out.append(Annotate(0, START))

    def stop(self) -> None:
        self.flush()
        self._open = False
        if self._gc_was_on:
            gc.enable()
        for f in self._finalizers.values():
            f.detach()  # the trace is over; tensors living on need no callbacks
        self._finalizers.clear()

    def mark_backward(self) -> None:
        """Called before each operator: the first one the autograd engine runs starts the backward."""
        if not self._backward and torch._C._current_graph_task_id() != -1:
            self._backward = True
            self.out.append(Annotate(0, BACKWARD))

    # --- names and keys ------------------------------------------------------------------
    def fresh_key(self) -> int:
        """A key no storage has (negative: data pointers are not)."""
        self._fresh_keys += 1
        return -self._fresh_keys

    def key(self, ptr: int, nbytes: int) -> int:
        return ptr if nbytes > 0 and ptr != 0 else self.fresh_key()

    def key_of(self, name: str) -> int:
        return self._key_of[name]

    def name(self, t: torch.Tensor) -> str | None:
        """The tensor's name, or None if it has none."""
        return self._names.get(id(t))

    def _new_name(self) -> str:
        self._counter += 1
        return f"x{self._counter}"

    def _track(self, t: torch.Tensor | None, name: str, key: int, nbytes: int) -> None:
        self._key_of[name] = key
        self._on_key.setdefault(key, {})[name] = None
        entry = self._storages.get(key)
        if entry is None:
            self._storages[key] = [nbytes, 1]
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        else:
            entry[1] += 1
        if t is not None:  # None: a name whose tensor died, kept until its plan releases it
            self._names[id(t)] = name
            self._finalizers[name] = weakref.finalize(t, self._pending.append, (id(t), name))

    def _untrack(self, tid: int | None, name: str) -> None:
        """Forget a name and count its storage's bytes down."""
        if tid is not None and self._names.get(tid) == name:
            del self._names[tid]
        f = self._finalizers.pop(name, None)
        if f is not None:
            f.detach()
        key = self._key_of.pop(name)
        del self._on_key[key][name]
        if not self._on_key[key]:
            del self._on_key[key]
        entry = self._storages[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._storages[key]
            self.live_bytes -= entry[0]

    def name_of(self, t: torch.Tensor, key: int | None = None, nbytes: int | None = None) -> str:
        """The tensor's name; a tensor not made inside the step (input, parameter) is a CONSTANT,
        on storage `key` of `nbytes` (by default its data pointer and size)."""
        name = self._names.get(id(t))
        if name is None:
            name = self._new_name()
            if key is None:
                ptr, nbytes = storage_of(t)
                key = self.key(ptr, nbytes)
            on = self._on_key.get(key)
            if on:
                # A second view of a storage already named (two slices of one input, a view of a
                # parameter): an alias of a name on it, at no cost, so the storage counts once.
                self.out.append(Call(0, VIEW_OP, (next(iter(on)),), (name,), 0))
                self.out.append(Memory(0, name, nbytes))
                self.out.append(Alias(0, name, 0))
            else:
                self.out.append(Constant(0, name))
                self.out.append(Memory(0, name, nbytes))
            self._track(t, name, key, nbytes)
            self._constant_keys.add(key)
        return name

    def _hold(self, name: str, releasing: bool = False) -> None:
        """Before a write to `name`, or the RELEASE of the last name on its storage (`releasing`):
        if that is a constant's storage not yet held, the owner's reference to it (a COPY, never
        released: the module docstring). Until its first write the storage's names are all on the
        constant's storage in the trace; from the write on, it is held."""
        key = self._key_of[name]
        if releasing and len(self._on_key[key]) > 1:
            return
        if key in self._constant_keys and key not in self._held:
            self._held.add(key)
            self.out.append(Copy(0, self._new_name(), name))

    def flush(self) -> None:
        """The releases queued since the last flush, as RELEASE lines (with `own_releases`; else the
        dead tensors are only forgotten: their names live on until `release`)."""
        while self._pending:
            tid, name = self._pending.popleft()
            if not self._open or name not in self._key_of:
                continue
            if self.own_releases:
                self._hold(name, releasing=True)
                self._untrack(tid, name)
                self.out.append(Release(0, name))
            else:
                if self._names.get(tid) == name:
                    del self._names[tid]
                self._finalizers.pop(name, None)

    def release(self, name: str) -> None:
        """A name the plan releases now (without `own_releases`); no instruction is written."""
        if name in self._key_of:
            f = self._finalizers.get(name)
            alive = f.peek() if f is not None else None
            self._untrack(id(alive[0]) if alive else None, name)

    # --- operators -----------------------------------------------------------------------
    def emit(self, op: str, arg_names: list[str], mutated: list[int], results: list[tuple[torch.Tensor, int, int]],
             time_ns: int) -> list[str]:
        """An operator that ran on the tensors named `arg_names`, wrote those at positions `mutated`
        and made `results` (tensor, storage key, nbytes; none already named), taking time_ns.
        Returns the results' names; writes nothing for an operator with neither."""
        if mutated:
            for m in mutated:
                self._hold(arg_names[m])
            self.out.append(Mutate(0, op, tuple(arg_names), tuple(mutated), time_ns))
            self.operators += 1
            written_keys: dict[int, str] = {}
            for m in mutated:
                key = self._key_of[arg_names[m]]
                if key not in written_keys:
                    written_keys[key] = arg_names[m]
                    self.mutated_bytes += self._storages[key][0]
            moved = self._rebind(written_keys, {arg_names[m] for m in mutated})
            arg_names = [moved.get(n, n) for n in arg_names]
            time_ns = 0  # the MUTATE carries the time; fresh results of the same call cost nothing more
        if not results:
            if not mutated:
                self.skipped_ns += time_ns
            return []
        arg_keys = [self._key_of[n] for n in arg_names]
        names = [self._new_name() for _ in results]
        self.out.append(Call(0, op, tuple(arg_names), tuple(names), time_ns))
        self.operators += 1
        for (t, key, nbytes), name in zip(results, names):
            alias = arg_keys.index(key) if key in arg_keys else -1
            if alias < 0 and key in self._storages:
                self.unattributed += 1  # shares a live storage the trace cannot name
            self.out.append(Memory(0, name, nbytes))
            self.out.append(Alias(0, name, alias))
            self._track(t, name, key, nbytes)
        return names

    def _rebind(self, written_keys: dict[int, str], written: set[str]) -> dict[str, str]:
        """Every other named tensor on a written storage, moved to its new version (the module
        docstring); returns old name -> new name."""
        moved: dict[str, str] = {}
        for key, via in written_keys.items():
            nbytes = self._storages[key][0]
            for old in [n for n in self._on_key.get(key, ()) if n not in written]:
                f = self._finalizers.get(old)
                alive = f.peek() if f is not None else None
                if alive is None and self.own_releases:
                    continue  # it died during the operator: its RELEASE is queued
                t = alive[0] if alive else None
                new = self._new_name()
                self.out.append(Call(0, REBIND_OP, (via,), (new,), 0))
                self.out.append(Memory(0, new, nbytes))
                self.out.append(Alias(0, new, 0))
                self._track(t, new, key, nbytes)
                self._untrack(id(t) if t is not None else None, old)
                self.out.append(Release(0, old))
                self.rebinds += 1
                moved[old] = new
        return moved
