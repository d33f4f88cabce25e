"""The real peak of a staged step, apart from any model (the measurement behind docs/staged.md's
claims): the bytes of the live storages, counted by identity after every node as the graph runs; or,
for compiled code (which allocates its buffers below the dispatcher, where no storage can be
followed), the allocator's own count: the CPU allocator's reports to the profiler (every allocation
and free, with its bytes), or on a CUDA device the caching allocator's peak statistic.

Owns only the counting; the storage count runs the same graph the staged step runs, through FX's
interpreter, which drops each value after its last use as the generated code does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch.fx import GraphModule, Interpreter
from torch.utils import _pytree as pytree

from .rewrite import saves_rng


@dataclass(frozen=True)
class MeasuredPeak:
    """peak_bytes: the most bytes of distinct live storages at once (inputs, held values and the
    node's results, while the node's arguments are still held); rng_bytes: of those, at the peak,
    the saved generator states that random recomputations replay; kind: "storages" (counted by
    identity) or "allocator" (allocator_peak_bytes, which cannot tell the generator states apart)."""

    peak_bytes: int
    rng_bytes: int
    kind: str = "storages"


def _storages(values: Iterable) -> dict:
    """The distinct storages of the tensors among `values` (nested), each with its bytes."""
    out = {}
    for x in pytree.tree_leaves(list(values)):
        if isinstance(x, torch.Tensor):
            s = x.untyped_storage()
            out[(s.device, s.data_ptr())] = s.nbytes()
    return out


class _Counter(Interpreter):
    def __init__(self, gm: GraphModule, inputs: list) -> None:
        super().__init__(gm, garbage_collect_values=True)
        self.peak = self.peak_rng = 0
        # Live for the whole run whatever the interpreter drops after their last use: the inputs (the
        # caller holds them) and the module's own tensors (constants the graph reads with get_attr).
        self.held = _storages([*inputs, *(getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr")])

    def run_node(self, n):
        # The generated code drops a value no node uses right after making it; the interpreter
        # keeps it, so it is dropped here, before the next node runs.
        for dead in [k for k in self.env if not k.users and k.op != "placeholder"]:
            del self.env[dead]
        result = super().run_node(n)
        live, rng = dict(self.held), {}
        for node, value in list(self.env.items()) + [(n, result)]:
            found = _storages([value])
            live.update(found)
            if saves_rng(node):
                rng.update(found)
        total = sum(live.values())
        if total > self.peak:
            self.peak = total
            self.peak_rng = sum(rng.values())
        return result


def measure_peak(gm: GraphModule, inputs: list) -> tuple[list, MeasuredPeak]:
    """Run `gm` on `inputs` counting live storages; its outputs and the peak."""
    counter = _Counter(gm, inputs)
    outs = counter.run(*inputs)
    return outs, MeasuredPeak(counter.peak, counter.peak_rng)


def allocator_peak_bytes(step: Callable[[], object], state: Iterable[torch.Tensor]) -> int:
    """The bytes of `state`'s distinct storages, plus the most the allocator held at once, above where
    it stood when `step` began, while `step` ran: CUDA's caching allocator's count (its own peak
    statistic) when any of `state` is on a CUDA device, else the CPU allocator's. On the CPU the
    profiler reports no free of a block allocated before it started: `state` must be all that lives
    from before and is freed inside (a step's old gradients dropped before, as its own zero_grad would)."""
    held = _storages(state)
    cuda = [device for device, _ in held if device.type == "cuda"]
    if cuda:
        return sum(held.values()) + _cuda_most_above_start(step, cuda[0])
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    changes = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    now = most = 0
    for _, nbytes in changes:
        now += nbytes
        most = max(most, now)
    return sum(held.values()) + most


def _cuda_most_above_start(step: Callable[[], object], device: torch.device) -> int:
    """The most CUDA's caching allocator held on `device` while `step` ran, above its level at the start."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - start
