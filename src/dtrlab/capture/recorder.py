"""Recording one PyTorch training step as a DTR trace: every aten operator, timed.

Owns the timing of each operator and the Capture it makes; the names and instructions are
naming.Namer's (shared with the live runtime), and so is the byte count on storage identity.

The recorder's peak (`Capture.peak_bytes`) is counted on storage identity: a storage (by its
data pointer) is live while some named tensor on it is live, and counts its nbytes once.
dtrlab's simulated unconstrained peak of the written trace must equal it when the step has
no in-place operator; the trace format models an in-place operator as a fresh copy (MUTATE),
so each adds at most its storage's bytes to the simulated peak (`Capture.mutated_bytes`).
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..errors import UsageError
from .naming import Namer, replay_views, storage_of
from .schema import written_tensors
from ..trace.read import Call, Instruction, Mutate


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


def new_results(out, named: Callable[[torch.Tensor], bool]) -> list[torch.Tensor]:
    """An operator's tensors that are new: not already named (an in-place operator's `self`), each once."""
    flat, _ = tree_flatten(out)
    results, seen = [], set()
    for t in flat:
        if isinstance(t, torch.Tensor) and not named(t) and id(t) not in seen:
            seen.add(id(t))
            results.append(t)
    return results


class Recorder(TorchDispatchMode):
    """A dispatch mode that writes each aten operator it sees as trace instructions.

    sync: called before and after each operator so its time is the device's (CUDA needs
    torch.cuda.synchronize; on a CPU the call returns when the work is done).
    """

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        super().__init__()
        self._sync = sync
        self.namer = Namer()

    def __enter__(self):
        self.namer.start()
        self._replayed = replay_views(True)  # as the live runtime runs the step (naming.replay_views)
        return super().__enter__()

    def __exit__(self, *exc):
        result = super().__exit__(*exc)
        replay_views(self._replayed)
        self.namer.stop()
        return result

    def capture(self) -> Capture:
        n = self.namer
        return Capture(tuple(n.out), n.peak_bytes, n.mutated_bytes, n.unattributed, n.operators, n.skipped_ns)


def _dispatch(self: Recorder, func, types, args=(), kwargs=None):
    """The Recorder's handler: the operator's instructions around its timed run."""
    kwargs = kwargs or {}
    namer = self.namer
    with namer.lock:
        namer.flush()
        flat, _ = tree_flatten((args, kwargs))
        inputs = [t for t in flat if isinstance(t, torch.Tensor)]
        namer.mark_backward()
        arg_names = [namer.name_of(t) for t in inputs]
        written = written_tensors(func, args, kwargs)
        mutated = [next(j for j, t in enumerate(inputs) if t is w) for w in written]
    if self._sync is not None:
        self._sync()
    start_ns = time.perf_counter_ns()
    out = func(*args, **kwargs)
    if self._sync is not None:
        self._sync()
    time_ns = time.perf_counter_ns() - start_ns
    with namer.lock:
        namer.flush()
        results = []
        for t in new_results(out, lambda t: namer.name(t) is not None):
            ptr, nbytes = storage_of(t)
            results.append((t, namer.key(ptr, nbytes), nbytes))
        namer.emit(str(func), arg_names, mutated, results, time_ns)
    return out


# The mode's handler, set after the class is made: TorchDispatchMode wraps a handler defined in the
# class body in dynamo's "disable", whose first call in a process imports torch._dynamo. That import
# leaves a reference cycle holding the frames of the step it ran under; with the cycle collector
# off (Namer.start), their tensors lived until the step's end, in the first capture of a process only.
Recorder.__torch_dispatch__ = _dispatch


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

    A warm-up runs under a Recorder whose trace is dropped, so the recordings see the steady state
    of the step and of the recording alike (lazily made state: an optimizer's, a first run's imports).
    The repeats must run the same operators in the same order (a step with data-dependent
    control flow cannot be summarized this way).
    """
    if repeat < 1 or warmup < 0:
        raise UsageError(f"repeat must be at least 1 and warmup at least 0, got {repeat} and {warmup}")
    for _ in range(warmup):
        record(step, sync=sync)
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
