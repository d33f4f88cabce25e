"""How the live runtime makes each operator's outputs again: one recipe per operator of the engine's tables.

Owns the recipes and running them (the live session decides when). Four kinds, after the
instructions that made the operator:
- CONSTANT: a tensor made outside the step; its value is the caller's tensor, never remade.
- CALL: an aten operator's new tensors (its results, in the order the trace names them).
- MUTATE: the new versions of the tensors an aten operator writes. Writes always go to copies of
  the written storages' bytes, so the old versions stay as they were (the trace's MUTATE is a
  copy); a CALL that follows a MUTATE of the same run reads the new versions and writes copies too.
- REBIND: a tensor moved to a written storage's new version (capture/naming.py): the same window
  on the new version's bytes.
"""

from __future__ import annotations

import time

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

CONSTANT, CALL, MUTATE, REBIND = "constant", "call", "mutate", "rebind"

elapsed_clock_ns = time.perf_counter_ns  # what an operator's run is timed with (the measured clock)

Window = tuple  # (shape, stride, storage offset, dtype, device) of a tensor on its storage


def window_of(t: torch.Tensor) -> Window:
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device)


def on_bytes(window: Window, raw: torch.UntypedStorage) -> torch.Tensor:
    """The tensor with this window on the given bytes."""
    shape, stride, offset, dtype, device = window
    return torch.empty((0,), dtype=dtype, device=device).set_(raw, offset, shape, stride)


def data_ptr(t: torch.Tensor) -> int:
    """The data pointer of a tensor's storage, or 0 for an empty one (it shares nothing)."""
    s = t.untyped_storage()
    return s.data_ptr() if s.nbytes() > 0 else 0


# --- an aten call's arguments and results as leaves -------------------------------------------
# An aten schema's arguments are leaves or lists of leaves (one level), and its results a tensor or
# a tuple or list of them: a flat walk covers them, and pytree (far slower) anything deeper.
_SEQ = (list, tuple)


def flatten_call(args: tuple, kwargs: dict) -> tuple[list, object]:
    """(leaves, spec) of an operator's arguments; `unflatten_call` rebuilds them from new leaves."""
    flat, shape = [], []
    for v in (*args, *kwargs.values()) if kwargs else args:
        t = type(v)
        if t is list or t is tuple:
            for y in v:
                if type(y) in _SEQ or type(y) is dict:
                    return tree_flatten((args, kwargs))
            shape.append((t, len(v)))
            flat.extend(v)
        elif t is dict:
            return tree_flatten((args, kwargs))
        else:
            shape.append(None)
            flat.append(v)
    return flat, (len(args), tuple(kwargs), tuple(shape))


def unflatten_call(flat: list, spec) -> tuple[tuple, dict]:
    if not type(spec) is tuple:
        return tree_unflatten(flat, spec)
    n_args, keys, shape = spec
    out, i = [], 0
    for sh in shape:
        if sh is None:
            out.append(flat[i])
            i += 1
        else:
            t, n = sh
            out.append(t(flat[i:i + n]))
            i += n
    return tuple(out[:n_args]), dict(zip(keys, out[n_args:]))


def flatten_out(out) -> tuple[list, object]:
    """(leaves, spec) of what an operator returned; `unflatten_out` rebuilds it."""
    t = type(out)
    if t is list or t is tuple:
        if any(type(y) in _SEQ or type(y) is dict for y in out):
            return tree_flatten(out)
        return list(out), t
    if t is dict:
        return tree_flatten(out)
    return [out], None


def unflatten_out(flat: list, spec):
    if spec is None:
        return flat[0]
    if spec is list or spec is tuple:
        return spec(flat)
    return tree_unflatten(flat, spec)


def cuda_devices(flat) -> list[int]:
    return sorted({x.device.index or 0 for x in flat if isinstance(x, torch.Tensor) and x.device.type == "cuda"})


def rng_state(flat) -> tuple:
    """The default generators' states (the CPU's, and each CUDA device's the operator touches)."""
    return torch.get_rng_state(), {d: torch.cuda.get_rng_state(d) for d in cuda_devices(flat)}


class Run:
    """One run of an aten operator: what it was given (`passed`: the values at the tensor leaves,
    written ones replaced by windows on copies), what it returned, and its elapsed time."""

    __slots__ = ("passed", "out_flat", "out_spec", "results", "elapsed_ns")

    def __init__(self, passed, out_flat, out_spec, elapsed_ns: int) -> None:
        self.passed = passed
        self.out_flat = out_flat
        self.out_spec = out_spec
        self.elapsed_ns = elapsed_ns
        # new tensors: none of the values passed (an in-place operator returns its `self`), each once
        self.results: list[torch.Tensor] = []
        seen: set[int] = set()
        for v in out_flat:
            if isinstance(v, torch.Tensor) and not any(v is p for p in passed) and id(v) not in seen:
                seen.add(id(v))
                self.results.append(v)


class Recipe:
    """How operator `op` of the engine's tables is made. args: its argument tensors (engine ids,
    the trace's order); for CALL and MUTATE the aten call: func, spec, leaves (non-tensor leaves
    kept, tensor leaves None), tensor_leaf (the leaf of each argument), written (the arguments
    it writes, by argument index, in the trace's MUTATE order), rng (generator states before
    its first run, for a random operator). window: a REBIND's; constant: a CONSTANT's tensor."""

    __slots__ = ("kind", "args", "func", "spec", "leaves", "tensor_leaf", "written", "rng", "window", "constant")

    def __init__(self, kind: str, args: list[int], func=None, spec=None, leaves=None, tensor_leaf=(),
                 written=(), rng=None, window: Window | None = None, constant: torch.Tensor | None = None) -> None:
        self.kind = kind
        self.args = args
        self.func = func
        self.spec = spec
        self.leaves = leaves
        self.tensor_leaf = tensor_leaf
        self.written = written
        self.rng = rng
        self.window = window
        self.constant = constant


def _written_copy(v: torch.Tensor) -> torch.Tensor:
    """The same window as v on a copy of its storage's bytes."""
    raw = v.untyped_storage()
    if v.storage_offset() == 0 and v.is_contiguous() and v.numel() * v.element_size() == raw.nbytes():
        return v.clone()  # it is its whole storage: one copy, strides and all
    return on_bytes(window_of(v), raw.clone())


def execute(r: Recipe, arg_values: list[torch.Tensor], replay: bool) -> Run:
    """Run the recipe's aten call on these argument values. Every written argument gets a window
    on a copy of its storage's bytes (one copy per storage), so nothing the caller holds is written;
    a replay of a random operator restores the generators' states from before its first run and
    leaves the caller's as they were."""
    values = list(r.leaves)
    for leaf, v in zip(r.tensor_leaf, arg_values):
        values[leaf] = v
    if r.written:
        copies: dict[int, torch.Tensor] = {}  # storage -> the first written tensor's copy
        for i in r.written:
            v = arg_values[i]
            key = data_ptr(v) or -id(v)
            first = copies.get(key)
            if first is None:
                copies[key] = values[r.tensor_leaf[i]] = _written_copy(v)
            else:  # another tensor on a storage already copied: its window on that copy
                values[r.tensor_leaf[i]] = on_bytes(window_of(v), first.untyped_storage())
    passed = [values[leaf] for leaf in r.tensor_leaf]
    args, kwargs = unflatten_call(values, r.spec)
    if r.rng is None or not replay:
        start_ns = elapsed_clock_ns()
        out = r.func(*args, **kwargs)
        elapsed_ns = elapsed_clock_ns() - start_ns
    else:
        cpu, cuda = r.rng
        with torch.random.fork_rng(devices=list(cuda)):
            torch.set_rng_state(cpu)
            for d, st in cuda.items():
                torch.cuda.set_rng_state(st, d)
            start_ns = elapsed_clock_ns()
            out = r.func(*args, **kwargs)
            elapsed_ns = elapsed_clock_ns() - start_ns
    flat, spec = flatten_out(out)
    return Run(passed, flat, spec, elapsed_ns)
