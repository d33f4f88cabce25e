"""The whole-step graph: a user's training step (forward, backward, optimizer update) traced once into
one functional aten-level FX graph, with parameters, buffers, gradients and optimizer state lifted to inputs and outputs.

Owns the tracing (make_fx on fake tensors, then functionalization), what it refuses, and how the
graph's outputs are written back into the step's modules and optimizers (docs/staged.md).
"""

from __future__ import annotations

import contextlib
import inspect
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.utils import _pytree as pytree

from ..errors import DtrlabError


class NotStageable(DtrlabError):
    """A step dtrlab cannot trace whole, said in one line (it refuses rather than stage it wrong)."""


# Where a graph output goes after a step: into a lifted input (written in place), a parameter's
# .grad, an optimizer's state entry, or the step's own return value.
INPUT, GRAD, STATE, RETURN = "input", "grad", "state", "return"


@dataclass(frozen=True)
class Holders:
    """What a step's state lives in: its modules and optimizers, and the learning-rate schedulers its
    code names (put back if the trace steps them)."""

    modules: tuple[nn.Module, ...]
    optimizers: tuple[torch.optim.Optimizer, ...]
    schedulers: tuple = ()


@dataclass(frozen=True, eq=False)
class StepGraph:
    """A traced step. gm takes `len(inputs)` tensors (the step's arguments, then the lifted state)
    and returns a flat list; sinks[i] says where output i goes; ret_spec rebuilds the step's return."""

    gm: torch.fx.GraphModule
    n_args: int
    sinks: tuple[tuple, ...]
    ret_spec: Any
    key: tuple  # the state's structure it was traced for (structure_key)
    # Inputs the graph does not take (indices into the step's arguments then lifted_state): the
    # previous step's gradients, when the step sets new ones without reading them (zero_grad).
    dropped: tuple[int, ...] = ()

    def inputs(self, args: tuple, holders: Holders, release: bool = True,
               held: "Held | None" = None) -> tuple[list, list]:
        """(every input, the step's arguments then lifted_state, for write_back; the graph's own).
        release: a dropped gradient is let go first, its parameter's .grad set to None as the step
        itself does before it makes a new one, so that it is not held while the graph runs. held:
        the holders' tensors as taken for this call (held_by), else taken here."""
        held = held or held_by(holders)
        every = list(args) + held.state
        if self.dropped and release:
            gone = {id(every[k]) for k in self.dropped}
            for p in held.params:
                if p.grad is not None and id(p.grad) in gone:
                    p.grad = None
            for k in self.dropped:
                every[k] = None
        dropped = set(self.dropped)
        return every, [x for k, x in enumerate(every) if k not in dropped]


def find_holders(step: Callable, modules=None, optimizers=None) -> Holders:
    """The modules and optimizers a step works on: those given, else the step's `model` / `optimizer`
    attributes and the modules and optimizers its code names (closure variables and globals); and the
    learning-rate schedulers named there."""
    flat = _named_by(step)
    mods = list(modules) if modules is not None else [x for x in flat if isinstance(x, nn.Module)]
    opts = list(optimizers) if optimizers is not None else [x for x in flat if isinstance(x, torch.optim.Optimizer)]
    scheds = [x for x in flat if isinstance(x, torch.optim.lr_scheduler.LRScheduler)]
    return Holders(tuple({id(m): m for m in mods}.values()), tuple({id(o): o for o in opts}.values()),
                   tuple({id(s): s for s in scheds}.values()))


def _named_by(step: Callable, depth: int = 4) -> list:
    """The objects a step names: its `model` / `optimizer` (`modules` / `optimizers`) attributes, its
    closure variables and globals, and, `depth` calls down, those of the user's functions it names
    (a step that calls another step function); lists and tuples opened."""
    out: list = []
    seen: set[int] = set()

    def visit(fn: Callable, level: int) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        found = [getattr(fn, a) for a in ("model", "optimizer", "modules", "optimizers") if hasattr(fn, a)]
        try:
            cv = inspect.getclosurevars(fn)
            found += list(cv.nonlocals.values()) + list(cv.globals.values())
        except TypeError:  # not a Python function (a callable object): only its attributes
            pass
        for x in found:
            for y in (list(x) if isinstance(x, (list, tuple)) else [x]):
                out.append(y)
                if level > 0 and inspect.isfunction(y) and not (y.__module__ or "").startswith(("torch", "dtrlab")):
                    visit(y, level - 1)

    visit(step, depth)
    return out


def _walk(holders: Holders) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(every parameter once: the modules', then the optimizers' own (raw tensors an optimizer holds);
    every buffer once), in the order Module.parameters() and .buffers() give, in one walk of the
    modules (a DenseNet step walked them six times a call, 5% of its time)."""
    params: dict[int, torch.Tensor] = {}
    buffers: dict[int, torch.Tensor] = {}
    for m in holders.modules:
        for sub in m.modules():
            for p in sub._parameters.values():
                if p is not None:
                    params.setdefault(id(p), p)
            for b in sub._buffers.values():
                if b is not None:
                    buffers.setdefault(id(b), b)
    for o in holders.optimizers:
        for g in o.param_groups:
            for p in g["params"]:
                params.setdefault(id(p), p)
    return list(params.values()), list(buffers.values())


def _params(holders: Holders) -> list[torch.Tensor]:
    """Every parameter once: the modules', then the optimizers' own (raw tensors an optimizer holds)."""
    return _walk(holders)[0]


@dataclass(frozen=True)
class Held:
    """The holders' tensors at one moment: params (_params), state (lifted_state). A staged step takes
    them once a call, for the structure's check and the graph's inputs alike."""

    params: list
    state: list


def held_by(holders: Holders) -> Held:
    params, buffers = _walk(holders)
    return Held(params, _lifted(holders, params, buffers))


def lifted_state(holders: Holders) -> list[torch.Tensor]:
    """The tensors a step reads and may write, in a fixed order: parameters, buffers, existing
    gradients, optimizer state; each once."""
    return held_by(holders).state


def _lifted(holders: Holders, params: list, buffers: list) -> list[torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}
    for p in params:
        seen.setdefault(id(p), p)
    for b in buffers:
        seen.setdefault(id(b), b)
    for p in params:
        if p.grad is not None:
            seen.setdefault(id(p.grad), p.grad)
    for o in holders.optimizers:
        for p in _opt_params(o):
            for v in o.state.get(p, {}).values():
                if isinstance(v, torch.Tensor):
                    seen.setdefault(id(v), v)
    return list(seen.values())


def _opt_params(o: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in o.param_groups for p in g["params"]]


def structure_key(holders: Holders, args: tuple, held: Held | None = None) -> tuple:
    """What a traced graph is specific to: every lifted tensor's shape, strides and dtype, which
    parameters have a gradient, which state entries each optimizer holds, the arguments' shapes."""
    def sig(t):
        return (t.shape, t.stride(), t.dtype, t.device, t.requires_grad)
    held = held or held_by(holders)
    state = tuple(sig(t) for t in held.state)
    grads = tuple(p.grad is not None for p in held.params)
    opt = tuple(tuple(tuple(sorted(o.state.get(p, {}))) for p in _opt_params(o)) for o in holders.optimizers)
    hyper = tuple(_hyperparameters(o) for o in holders.optimizers)
    argsig = tuple(sig(a) if isinstance(a, torch.Tensor) else ("value", repr(a)) for a in args)
    return state, grads, opt, hyper, argsig


def _hyperparameters(o: torch.optim.Optimizer) -> tuple:
    """Each param group's settings but its params (lr, momentum, betas, ...), as text: what a graph
    traced with them holds as constants."""
    return tuple(tuple(sorted((k, repr(v)) for k, v in g.items() if k != "params")) for g in o.param_groups)


@contextlib.contextmanager
def _hyperparameters_kept(holders: Holders):
    """Refuse a step that changes an optimizer's settings (a learning-rate scheduler stepped inside
    it): the graph would hold the trace's values at every step. Whatever the trace did, the settings
    and the schedulers found are put back after it."""
    groups = [[{k: v for k, v in g.items() if k != "params"} for g in o.param_groups] for o in holders.optimizers]
    before = [_hyperparameters(o) for o in holders.optimizers]
    schedulers = [(s, s.state_dict()) for s in holders.schedulers]
    try:
        yield
        for j, o in enumerate(holders.optimizers):
            for k, (was, now) in enumerate(zip(before[j], _hyperparameters(o))):
                changed = [f"{a} ({_short(va)} -> {_short(vb)})" for (a, va), (_, vb) in zip(was, now) if va != vb]
                if changed:
                    raise NotStageable(
                        f"the step changes optimizer {j}'s {changed[0]} in param group {k}, as a scheduler inside "
                        "it does; a graph would keep the trace's value: step it outside the staged step")
    finally:
        for o, saved in zip(holders.optimizers, groups):
            for g, values in zip(o.param_groups, saved):
                g.update(values)
        for sched, state in schedulers:
            sched.load_state_dict(state)


def _short(text: str) -> str:
    """A hyperparameter's repr, a number to 4 significant digits."""
    try:
        return f"{float(text):.4g}"
    except ValueError:
        return text[:24]


@contextlib.contextmanager
def _only_known_optimizers(holders: Holders):
    """Refuse a step whose optimizer dtrlab did not find: its update would read the real parameters'
    gradients, not the trace's, and the graph would hold no update at all."""
    known = {id(o) for o in holders.optimizers}

    def check(opt, args, kwargs):
        if id(opt) not in known:
            raise NotStageable(f"the step runs an optimizer ({type(opt).__name__}) dtrlab did not find: pass "
                               "optimizers=[...] or set step.optimizer")

    from torch.optim.optimizer import register_optimizer_step_pre_hook

    handle = register_optimizer_step_pre_hook(check)
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def _swapped(holders: Holders, fake_of: dict[int, torch.Tensor]):
    """The modules' parameters and buffers, the gradients and the optimizers' params and state
    replaced by their stand-ins for the duration of a trace, and put back after."""
    from torch.nn.utils.stateless import _reparametrize_module

    params = _params(holders)
    grads = {id(p): p.grad for p in params}
    saved_groups = [[list(g["params"]) for g in o.param_groups] for o in holders.optimizers]
    saved_state = [o.state for o in holders.optimizers]
    with contextlib.ExitStack() as stack:
        for m in holders.modules:
            mapping = {n: fake_of[id(t)] for n, t in list(m.named_parameters(remove_duplicate=False))
                       + list(m.named_buffers(remove_duplicate=False))}
            stack.enter_context(_reparametrize_module(m, mapping))
        try:
            for p in params:
                g = grads[id(p)]
                fake_of[id(p)].grad = None if g is None else fake_of[id(g)]
            for o in holders.optimizers:
                state = defaultdict(dict)
                for p in _opt_params(o):
                    if p in o.state:
                        state[fake_of[id(p)]] = {k: fake_of.get(id(v), v) if isinstance(v, torch.Tensor) else v
                                                 for k, v in o.state[p].items()}
                for g in o.param_groups:
                    g["params"] = [fake_of[id(p)] for p in g["params"]]
                o.state = state
            yield
        finally:
            for o, groups, state in zip(holders.optimizers, saved_groups, saved_state):
                for g, ps in zip(o.param_groups, groups):
                    g["params"] = ps
                o.state = state


def _batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    # native_batch_norm writes the running statistics without its schema saying so, which
    # functionalization cannot see; _native_batch_norm_legit says it (the same CPU and CUDA kernels).
    if running_mean is None or running_var is None:
        return torch.ops.aten._native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
    return torch.ops.aten._native_batch_norm_legit.default(input, weight, bias, running_mean, running_var,
                                                           training, momentum, eps)


_HONEST_SCHEMAS = {torch.ops.aten.native_batch_norm.default: _batch_norm}


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    data_dependent = ("data-dependent", "data dependent", "GuardOnDataDependent", "_local_scalar_dense",
                      "DataDependentOutput")
    if any(w in f"{type(exc).__name__} {first}" for w in data_dependent):
        return ("a value read from a tensor (.item(), a tensor in an `if` or a loop bound) decides what the step "
                "does, so no one graph holds every step; run it with the live runtime (dtrlab run)")
    return f"{type(exc).__name__}: {first[:200]}"


def trace_step(step: Callable, holders: Holders, args: tuple = ()) -> StepGraph:
    """Trace `step(*args)` with its holders' state lifted: make_fx on fake tensors (static shapes, a
    shape environment so that Python scalars read from tensors, as Adam's step count, stay symbolic
    and become graph nodes), then functionalized, so that every value is written once."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    key = structure_key(holders, args)
    state = lifted_state(holders)
    if any(not isinstance(a, torch.Tensor) for a in args):
        raise NotStageable("a staged step's arguments must be tensors (other values belong in its closure)")
    inputs = list(args) + state
    n_args = len(args)
    params = _params(holders)
    sinks: list[tuple] = []
    spec_box: list = []
    opt_params = [(o, _opt_params(o)) for o in holders.optimizers]
    python_state = {(id(o), id(p), k): v for o in holders.optimizers for p in _opt_params(o)
                    for k, v in o.state.get(p, {}).items() if not isinstance(v, torch.Tensor)}

    def run(*flat):
        fake_of = {id(real): fake for real, fake in zip(inputs, flat)}
        with _swapped(holders, fake_of):
            ret = step(*flat[:n_args])
            leaves, spec = pytree.tree_flatten(ret)
            if any(not isinstance(x, torch.Tensor) for x in leaves if x is not None):
                raise NotStageable("the step returns a value that is not a tensor; return tensors (or nothing)")
            outs, sinks[:] = [], []
            for i, x in enumerate(leaves):
                if x is not None:
                    outs.append(x)
                    sinks.append((RETURN, i))
            spec_box[:] = [(spec, len(leaves))]
            for k in range(n_args, len(inputs)):
                outs.append(flat[k])
                sinks.append((INPUT, k))
            for p in params:
                g = fake_of[id(p)].grad
                if g is not None:
                    outs.append(g)
                sinks.append((GRAD, p, g is not None))
            for o, ops in opt_params:
                for p in ops:
                    for name, v in o.state.get(fake_of[id(p)], {}).items():
                        if isinstance(v, torch.Tensor) and not any(v is f for f in flat):
                            outs.append(v)
                            sinks.append((STATE, o, p, name))
                        elif not isinstance(v, torch.Tensor) and python_state.get((id(o), id(p), name)) != v:
                            raise NotStageable(f"the optimizer keeps a Python value ({name!r}) that the step "
                                               "changes; only tensor state can be staged")
            return outs

    def fakes(mode, grad: bool):
        out = []
        for t in inputs:
            f = mode.from_tensor(t.detach(), static_shapes=True)
            out.append(f.requires_grad_() if grad and t.requires_grad and t.is_leaf else f)
        return out

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    try:
        with _hyperparameters_kept(holders), _only_known_optimizers(holders), _UserReads() as reads:
            gm = make_fx(run, decomposition_table=_HONEST_SCHEMAS, tracing_mode="fake",
                         _allow_non_fake_inputs=True)(*fakes(mode, True))
    except NotStageable:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever stops the trace is said as the reason
        raise NotStageable(f"the step cannot be traced whole: {_why(exc)}") from None
    mode2 = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    try:
        fgm = make_fx(torch.func.functionalize(gm, remove="mutations"), tracing_mode="fake",
                      _allow_non_fake_inputs=True)(*fakes(mode2, False))
    except Exception as exc:  # noqa: BLE001
        raise NotStageable(f"the step's graph cannot be made functional: {_why(exc)}") from None
    _refuse_escaped_reads(gm, reads.symbols)
    _clean(fgm, len(inputs))
    _refuse_unlifted(fgm)
    dropped, kept = _drop_unread_grads(fgm, inputs, params, tuple(sinks))
    return StepGraph(fgm, n_args, kept, spec_box[0], key, dropped)


def _drop_unread_grads(gm: torch.fx.GraphModule, inputs: list, params: list, sinks: tuple) -> tuple[tuple, tuple]:
    """The gradients the step replaces without reading them (a zero_grad that sets them to None, then
    a backward): each one's input is used only by its own write-back, the value unchanged. They leave
    the graph (the input and that output), so a staged step does not hold the previous step's
    gradients while it runs; the caller lets them go (StepGraph.inputs). Returns (the dropped input
    indices, the sinks left)."""
    grads = {id(p.grad) for p in params if p.grad is not None}
    g = gm.graph
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    output = next(n for n in g.nodes if n.op == "output")
    outs = list(output.args[0])
    at, i = [], 0  # each sink's output position (a gradient set to None has none)
    for sink in sinks:
        at.append(None if sink[0] == GRAD and not sink[2] else i)
        i += at[-1] is not None
    dropped, gone = [], set()
    for j, sink in enumerate(sinks):
        if sink[0] != INPUT or id(inputs[sink[1]]) not in grads:
            continue
        node = placeholders[sink[1]]
        if list(node.users) == [output] and sum(o is node for o in outs) == 1 and outs[at[j]] is node:
            dropped.append(sink[1])
            gone.add(at[j])
    if not dropped:
        return (), sinks
    output.args = ([o for q, o in enumerate(outs) if q not in gone],)
    for k in dropped:
        g.erase_node(placeholders[k])
    g.lint()
    gm.recompile()
    return tuple(dropped), tuple(s for s in sinks if not (s[0] == INPUT and s[1] in dropped))


def _clean(gm: torch.fx.GraphModule, n_inputs: int) -> None:
    """Drop the profiler's markers; turn functionalization's write-backs into the inputs (copy_ at the
    end) into plain outputs (the caller writes them back after the step); refuse any write left."""
    g = gm.graph
    for node in reversed(list(g.nodes)):  # in reverse: an exit marker goes before the enter it uses
        if node.op == "call_function" and str(node.target).startswith("profiler."):
            g.erase_node(node)
    placeholders = [n for n in g.nodes if n.op == "placeholder"]
    for node in list(g.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default \
                and node.args[0] in placeholders:
            node.replace_all_uses_with(node.args[1])
            g.erase_node(node)
    for node in g.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
                and node.target._schema.is_mutable:
            raise NotStageable(f"the step writes in place ({node.target}) where functionalization cannot "
                               "turn the write into a new value")
    g.lint()
    gm.recompile()


def _refuse_unlifted(gm: torch.fx.GraphModule) -> None:
    """A tensor the graph holds as a constant is read as it is at each step (by reference): a parameter
    or buffer there means state the trace did not lift, which a staged step would not update."""
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)
            if isinstance(value, nn.Parameter) or (isinstance(value, torch.Tensor) and value.requires_grad):
                raise NotStageable(f"the step reads a parameter of shape {tuple(value.shape)} that belongs to no "
                                   "module or optimizer dtrlab found: pass modules=[...] / optimizers=[...] "
                                   "or set step.model / step.optimizer")


class _UserReads(torch.overrides.TorchFunctionMode):
    """Notes the numbers the user's own code reads out of tensors during a trace (`.item()`,
    `float(t)`, `int(t)`, `t.tolist()`): each read's symbol and the user's line. Reads made inside
    PyTorch (an optimizer's step count) are the library's, used or dropped there."""

    READS = {torch.Tensor.item, torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.tolist}

    def __init__(self) -> None:
        super().__init__()
        self.symbols: list[tuple[str, str]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self.READS:
            frame = inspect.currentframe().f_back
            while frame is not None and frame.f_code.co_filename.startswith(_TRACING_MACHINERY):
                frame = frame.f_back
            if frame is not None and not frame.f_code.co_filename.startswith(_TORCH_DIR):
                where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                leaves = out if isinstance(out, list) else [out]
                self.symbols += [(str(x.node.expr), where) for x in pytree.tree_leaves(leaves)
                                 if isinstance(x, (torch.SymFloat, torch.SymInt))]
        return out


_TORCH_DIR = str(Path(torch.__file__).parent)
# The frames between a read and the code that made it: the modes' dispatch (make_fx's own mode, fake tensors).
_TRACING_MACHINERY = tuple(str(Path(_TORCH_DIR, *part.split("/"))) for part in
                           ("overrides.py", "fx/", "_subclasses/", "utils/_python_dispatch.py", "_ops.py"))


def _refuse_escaped_reads(gm: torch.fx.GraphModule, reads: list[tuple[str, str]]) -> None:
    """A number the user's code read out of a tensor that no graph node uses went where the graph
    cannot follow it (a log, a print): the staged steps would never read it again."""
    where = dict(reads)
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.target is torch.ops.aten._local_scalar_dense.default and not node.users \
                and isinstance(val, (torch.SymFloat, torch.SymInt)) and str(val.node.expr) in where:
            raise NotStageable(f"{Path(where[str(val.node.expr)].rsplit(':', 1)[0]).name}:"
                               f"{where[str(val.node.expr)].rsplit(':', 1)[1]}: the step reads a number out of a "
                               "tensor (.item()) and keeps it outside the graph (a log?): return the tensor, read it after")


# A tensor this large takes its new value's storage rather than a copy of it, where it safely can: the
# check costs a few microseconds, the copy of 64 KiB about as much.
TAKE_BYTES = 1 << 16
_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _took(target: torch.Tensor, value: torch.Tensor) -> bool:
    """Give `target` (an input the step updates in place) `value`'s storage, as eager leaves it updated
    in place, when nothing can tell: no other tensor shares either storage (a view of a parameter a
    user holds would see the copy and not the swap), and the layouts are the same. False: copy."""
    if (_use_count is None or target.nbytes < TAKE_BYTES or value.dtype != target.dtype
            or value.device != target.device or value.shape != target.shape or value.stride() != target.stride()
            or value.storage_offset() != target.storage_offset()
            or value.untyped_storage().nbytes() != target.untyped_storage().nbytes()):
        return False
    # each count: the tensor's own and the storage object just made to ask
    if _use_count(target.untyped_storage()._cdata) != 2 or _use_count(value.untyped_storage()._cdata) != 2:
        return False
    with torch.no_grad():
        target.set_(value)
    return True


def write_back(graph: StepGraph, inputs: list[torch.Tensor], outs: list) -> Any:
    """Put a step's outputs where the eager step leaves them; return the step's own return value."""
    ret_leaves: list = [None] * graph.ret_spec[1]
    values = iter(outs)
    targets, updates = [], []  # inputs the step updates in place, and their new values, in order
    for sink in graph.sinks:
        kind = sink[0]
        if kind == GRAD:
            sink[1].grad = next(values) if sink[2] else None
            continue
        value = next(values)
        if kind == INPUT:
            target = inputs[sink[1]]
            if value is not target:
                if not _took(target, value):
                    targets.append(target)
                    updates.append(value)
        elif kind == STATE:
            _, o, p, name = sink
            o.state[p][name] = value
        else:
            ret_leaves[sink[1]] = value
    with torch.no_grad():
        if targets and {id(t) for t in targets}.isdisjoint(map(id, updates)):
            # one call for the hundreds of parameters, buffers and momenta a step updates (each copy_
            # a Python call of its own cost a DenseNet step 5%)
            torch._foreach_copy_(targets, updates)
        else:  # none (no optimizer, no buffers), or a new value that is itself an updated input: in order
            for target, value in zip(targets, updates):
                target.copy_(value)
    return pytree.tree_unflatten(ret_leaves, graph.ret_spec[0])
