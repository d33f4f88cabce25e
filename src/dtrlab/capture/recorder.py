"""Recording one PyTorch training step as a DTR trace: every aten operator, timed, with names.

Owns the mapping from live tensors to trace names and the recorder's own live-storage peak.

How a tensor's last reference is seen: each tensor the recorder names gets a weakref.finalize.
PyTorch keeps one Python object per TensorImpl and preserves it while C++ still holds the
TensorImpl (autograd's saved tensors, the graph), so the finalizer runs when the tensor
itself dies, not when Python code drops its last name for it: a saved activation is
released after the backward operator that used it, as in the DTR paper's instrumented
PyTorch. Finalizers only queue the release; the recorder turns the queue into RELEASE lines
between operators (never inside a CALL's MEMORY/ALIAS group) and updates its byte count
there, before any new storage is counted, so the peak is the same as at the real free time.

The recorder's peak (`Capture.peak_bytes`) is counted on storage identity: a storage (by its
data pointer) is live while some named tensor on it is live, and counts its nbytes once.
dtrlab's simulated unconstrained peak of the written trace must equal it when the step has
no in-place operator; the trace format models an in-place operator as a fresh copy (MUTATE),
so each adds at most its storage's bytes to the simulated peak (`Capture.mutated_bytes`).
"""

from __future__ import annotations

import collections
import gc
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..errors import UsageError
from .schema import written_tensors
from ..trace.read import BACKWARD, START, Alias, Annotate, Call, Constant, Instruction, Memory, Mutate, Release

@dataclass(frozen=True)
class Capture:
    """One recorded step: the trace's instructions and what the recorder saw of memory."""

    instructions: tuple[Instruction, ...]
    peak_bytes: int  # live storage bytes, on storage identity, constants included
    mutated_bytes: int  # storage bytes written in place: the trace's copies may add up to this
    unattributed_aliases: int  # results sharing a live storage that is none of their arguments
    operators: int  # CALL and MUTATE instructions
    skipped_ns: int  # time of operators with neither a new tensor nor a mutation (e.g. .item())

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.instructions if isinstance(i, (Call, Mutate)))


def _storage_of(t: torch.Tensor) -> tuple[int, int]:
    """(data pointer, nbytes) of a tensor's untyped storage; (0, 0) when it has none."""
    try:
        s = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # sparse, nested and other storage-less tensors
        return 0, 0
    return s.data_ptr(), s.nbytes()


class Recorder(TorchDispatchMode):
    """A dispatch mode that writes each aten operator it sees as trace instructions.

    sync: called before and after each operator so its time is the device's (CUDA needs
    torch.cuda.synchronize; on a CPU the call returns when the work is done).
    """

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._sync = sync
        self._out: list[Instruction] = []
        self._names: dict[int, str] = {}  # id(tensor) -> name, for live named tensors
        self._key_of: dict[str, int] = {}  # name -> storage key
        self._storages: dict[int, list[int]] = {}  # storage key -> [nbytes, live named tensors]
        self._finalizers: dict[str, weakref.finalize] = {}
        # Finalizers may run inside an operator, in our own code or on autograd's device
        # threads: they only append here (atomic), and _flush does the rest between operators.
        self._pending: collections.deque[tuple[int, str]] = collections.deque()
        self._lock = threading.RLock()
        self._counter = 0
        self._zero_keys = 0  # storages of 0 bytes share pointer 0: each gets its own key
        self._live_bytes = self._peak_bytes = 0
        self._mutated_bytes = self._unattributed = self._ops = self._skipped_ns = 0
        self._backward = False
        self._open = False

    # --- the mode ---------------------------------------------------------------------

    def __enter__(self):
        self._open = True
        self._out.append(Annotate(0, START))
        return super().__enter__()

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        self._flush()
        self._open = False
        for f in self._finalizers.values():
            f.detach()  # the trace is over; tensors living on need no callbacks
        self._finalizers.clear()
        return result

    def capture(self) -> Capture:
        return Capture(tuple(self._out), self._peak_bytes, self._mutated_bytes, self._unattributed,
                       self._ops, self._skipped_ns)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        with self._lock:
            self._flush()
            flat, _ = tree_flatten((args, kwargs))
            inputs = [t for t in flat if isinstance(t, torch.Tensor)]
            if not self._backward and torch._C._current_graph_task_id() != -1:
                self._backward = True  # the first operator the autograd engine runs
                self._out.append(Annotate(0, BACKWARD))
            arg_names = [self._name_of(t) for t in inputs]
            mutated = self._mutated(func, args, kwargs, inputs)
        if self._sync is not None:
            self._sync()
        start_ns = time.perf_counter_ns()
        out = func(*args, **kwargs)
        if self._sync is not None:
            self._sync()
        time_ns = time.perf_counter_ns() - start_ns
        with self._lock:
            self._flush()
            self._emit(str(func), inputs, arg_names, mutated, out, time_ns)
        return out

    # --- naming and counting ------------------------------------------------------------

    def _new_name(self) -> str:
        self._counter += 1
        return f"x{self._counter}"

    def _track(self, t: torch.Tensor, name: str, key: int, nbytes: int) -> None:
        self._names[id(t)] = name
        self._key_of[name] = key
        entry = self._storages.get(key)
        if entry is None:
            self._storages[key] = [nbytes, 1]
            self._live_bytes += nbytes
            self._peak_bytes = max(self._peak_bytes, self._live_bytes)
        else:
            entry[1] += 1
        self._finalizers[name] = weakref.finalize(t, self._pending.append, (id(t), name))

    def _key(self, ptr: int, nbytes: int) -> int:
        if nbytes > 0 and ptr != 0:
            return ptr
        self._zero_keys += 1
        return -self._zero_keys

    def _name_of(self, t: torch.Tensor) -> str:
        """The tensor's name; a tensor not made inside the step (input, parameter) is a CONSTANT."""
        name = self._names.get(id(t))
        if name is None:
            name = self._new_name()
            ptr, nbytes = _storage_of(t)
            self._out.append(Constant(0, name))
            # A constant sharing a live storage (a second view of a parameter) adds no bytes
            # here, but the trace has no way to say so: it is counted as unattributed.
            key = self._key(ptr, nbytes)
            if key in self._storages:
                self._unattributed += 1
            self._out.append(Memory(0, name, nbytes))
            self._track(t, name, key, nbytes)
        return name

    def _flush(self) -> None:
        while self._pending:
            tid, name = self._pending.popleft()
            if not self._open:
                continue
            if self._names.get(tid) == name:
                del self._names[tid]
            self._finalizers.pop(name, None)
            key = self._key_of.pop(name)
            entry = self._storages[key]
            entry[1] -= 1
            if entry[1] == 0:
                del self._storages[key]
                self._live_bytes -= entry[0]
            self._out.append(Release(0, name))

    def _mutated(self, func, args, kwargs, inputs: list[torch.Tensor]) -> list[int]:
        """Indices (into `inputs`) of the tensors the operator writes in place."""
        return [next(j for j, t in enumerate(inputs) if t is w) for w in written_tensors(func, args, kwargs)]

    def _emit(self, op: str, inputs, arg_names, mutated, out, time_ns: int) -> None:
        if mutated:
            self._out.append(Mutate(0, op, tuple(arg_names), tuple(mutated), time_ns))
            self._ops += 1
            seen_keys = set()
            for m in mutated:
                key = self._key_of[arg_names[m]]
                if key not in seen_keys:
                    seen_keys.add(key)
                    self._mutated_bytes += self._storages[key][0]
            time_ns = 0  # the MUTATE carries the time; fresh results of the same call cost nothing more
        flat, _ = tree_flatten(out)
        results, seen = [], set()
        for t in flat:
            # An output that is already named (an in-place operator's `self`) is no new tensor.
            if isinstance(t, torch.Tensor) and id(t) not in self._names and id(t) not in seen:
                seen.add(id(t))
                results.append(t)
        if not results:
            if not mutated:
                self._skipped_ns += time_ns
            return
        arg_keys = [self._key_of[n] for n in arg_names]
        names = [self._new_name() for _ in results]
        self._out.append(Call(0, op, tuple(arg_names), tuple(names), time_ns))
        self._ops += 1
        for t, name in zip(results, names):
            ptr, nbytes = _storage_of(t)
            key = self._key(ptr, nbytes)
            alias = arg_keys.index(key) if key in arg_keys else -1
            if alias < 0 and key in self._storages:
                self._unattributed += 1  # shares a live storage the trace cannot name
            self._out.append(Memory(0, name, nbytes))
            self._out.append(Alias(0, name, alias))
            self._track(t, name, key, nbytes)


def record(step: Callable[[], object], *, sync: Callable[[], None] | None = None) -> Capture:
    """Run `step` once under a Recorder; what it returns is dropped inside the recording."""
    gc.collect()  # garbage from before the step must not be released inside it
    recorder = Recorder(sync)
    with recorder:
        step()
    return recorder.capture()


def record_median(step: Callable[[], object], *, repeat: int = 1, warmup: int = 1,
                  sync: Callable[[], None] | None = None) -> Capture:
    """Record `step` `repeat` times after `warmup` unrecorded runs; each operator's time is the median.

    The repeats must run the same operators in the same order (a step with data-dependent
    control flow cannot be summarized this way).
    """
    if repeat < 1 or warmup < 0:
        raise UsageError(f"repeat must be at least 1 and warmup at least 0, got {repeat} and {warmup}")
    for _ in range(warmup):
        step()
    captures = [record(step, sync=sync) for _ in range(repeat)]
    first = captures[0]
    if repeat == 1:
        return first
    ops = [[i for i in c.instructions if isinstance(i, (Call, Mutate))] for c in captures]
    if any(c.op_names != first.op_names for c in captures):
        raise UsageError("the repeated steps ran different operators; use --repeat 1")
    medians = iter([int(statistics.median(o[k].time_ns for o in ops)) for k in range(len(ops[0]))])
    out = [i._replace(time_ns=next(medians)) if isinstance(i, (Call, Mutate)) else i
           for i in first.instructions]
    return replace(first, instructions=tuple(out))
