"""`dtrlab run --check`: a plain step from the state a live step started from, compared bitwise with
the live one: gradients, updated parameters, buffers, optimizer state, inputs.

Owns finding what a step changes (the modules, optimizers, schedulers and tensors its function
reaches: closure, bound object, defaults, the globals its code names, attributes), a snapshot of
it and its restoring, and the bitwise comparison (the live tests use the same `same_bits`).
"""

from __future__ import annotations

import copy
import types
from dataclasses import dataclass
from typing import Callable

import torch

SEARCH_DEPTH = 4  # how many containers or objects deep the step's state is looked for


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, so that equality is bitwise (NaN and -0.0 included)."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def plain(t):
    """The plain tensor behind a live one (its session's value); anything else as it is."""
    session = getattr(t, "_session", None)
    return session.value(t) if session is not None and isinstance(t, torch.Tensor) else t


@dataclass(frozen=True)
class StepState:
    """What a step can change, found from its function: modules, optimizers, LR schedulers and
    tensors (inputs), each in the order found."""

    modules: tuple[torch.nn.Module, ...]
    optimizers: tuple[torch.optim.Optimizer, ...]
    schedulers: tuple[object, ...]
    tensors: tuple[torch.Tensor, ...]

    def __len__(self) -> int:
        return len(self.modules) + len(self.optimizers) + len(self.schedulers) + len(self.tensors)


def find_state(step: Callable) -> StepState:
    """The modules, optimizers, schedulers and tensors `step` reaches (SEARCH_DEPTH deep)."""
    from torch.optim.lr_scheduler import LRScheduler

    found: dict[str, list] = {"modules": [], "optimizers": [], "schedulers": [], "tensors": []}
    seen: set[int] = set()

    def visit(obj, depth: int) -> None:
        if depth > SEARCH_DEPTH or id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
            return
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            found["modules"].append(obj)
        elif isinstance(obj, torch.optim.Optimizer):
            found["optimizers"].append(obj)
        elif isinstance(obj, LRScheduler):
            found["schedulers"].append(obj)
            visit(obj.optimizer, depth + 1)
        elif isinstance(obj, torch.Tensor):
            found["tensors"].append(obj)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for x in obj:
                visit(x, depth + 1)
        elif isinstance(obj, dict):
            for x in obj.values():
                visit(x, depth + 1)
        elif isinstance(obj, types.FunctionType):
            if (obj.__module__ or "").split(".")[0] == "torch":
                return  # PyTorch's own functions (a loss the step calls) hold no state of the step
            for cell in obj.__closure__ or ():
                try:
                    visit(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    pass
            visit(obj.__defaults__, depth + 1)
            visit(obj.__kwdefaults__, depth + 1)
            visit(obj.__dict__, depth + 1)
            names = obj.__code__.co_names
            visit([obj.__globals__[n] for n in names if n in obj.__globals__
                   and not isinstance(obj.__globals__[n], types.ModuleType)], depth + 1)
        elif isinstance(obj, types.MethodType):
            visit(obj.__func__, depth)
            visit(obj.__self__, depth + 1)
        elif hasattr(obj, "func") and hasattr(obj, "args") and hasattr(obj, "keywords"):  # functools.partial
            visit((obj.func, obj.args, obj.keywords), depth)
        elif not isinstance(obj, (type, types.ModuleType, types.BuiltinFunctionType)) and hasattr(obj, "__dict__"):
            visit(vars(obj), depth + 1)  # a user's object: a trainer holding its model

    visit(step, 0)
    module_params = {id(p) for m in found["modules"] for p in m.parameters()}
    module_tensors = module_params | {id(b) for m in found["modules"] for b in m.buffers()}
    # a module's own parameters and buffers are compared as the module's
    tensors = [t for t in found["tensors"] if id(t) not in module_tensors]
    return StepState(tuple(found["modules"]), tuple(found["optimizers"]), tuple(found["schedulers"]), tuple(tensors))


def _names(state: StepState) -> dict[int, str]:
    """A name for each parameter: its module's name for it (module k's, `m{k}.`, past the first)."""
    out: dict[int, str] = {}
    for k, m in enumerate(state.modules):
        prefix = f"m{k}." if k else ""
        for name, p in m.named_parameters():
            out.setdefault(id(p), prefix + name)
    return out


def _opt_params(opt) -> list[torch.Tensor]:
    return [p for group in opt.param_groups for p in group["params"]]


def read(state: StepState) -> dict[str, object]:
    """Every tensor (a plain copy) and optimizer value of the state, by name, as it is now."""
    names = _names(state)
    out: dict[str, object] = {}
    for k, m in enumerate(state.modules):
        prefix = f"m{k}." if k else ""
        for name, p in m.named_parameters():
            out[prefix + name] = _clone(p)
            if p.grad is not None:
                out[prefix + name + ".grad"] = _clone(p.grad)
        for name, b in m.named_buffers():
            out[prefix + name] = _clone(b)
    for k, opt in enumerate(state.optimizers):
        for j, p in enumerate(_opt_params(opt)):
            pname = names.get(id(p), f"param{j}")
            if pname not in out:
                out[pname] = _clone(p)
                if p.grad is not None:
                    out[pname + ".grad"] = _clone(p.grad)
            for key, v in opt.state.get(p, {}).items():
                out[f"optimizer{k}.{pname}.{key}"] = _clone(v)
        for g, group in enumerate(opt.param_groups):
            for key, v in group.items():
                if key != "params":
                    out[f"optimizer{k}.group{g}.{key}"] = _clone(v)
    for k, s in enumerate(state.schedulers):
        for key, v in s.state_dict().items():
            out[f"scheduler{k}.{key}"] = _clone(v)
    for k, t in enumerate(state.tensors):
        out[f"tensor{k}"] = _clone(t)
    return out


def _clone(v):
    v = plain(v)
    return v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)


@dataclass(frozen=True)
class Snapshot:
    """A step's state as it was, and torch's random generators' states."""

    values: dict
    rng: tuple


def snapshot(state: StepState) -> Snapshot:
    values = {
        "params": [(p, _clone(p), None if p.grad is None else _clone(p.grad))
                   for m in state.modules for p in m.parameters()]
                  + [(p, _clone(p), None if p.grad is None else _clone(p.grad))
                     for opt in state.optimizers for p in _opt_params(opt)],
        "buffers": [(b, _clone(b)) for m in state.modules for b in m.buffers()],
        "optimizers": [(opt, {p: {k: _clone(v) for k, v in st.items()} for p, st in opt.state.items()},
                        [{k: _clone(v) for k, v in g.items() if k != "params"} for g in opt.param_groups])
                       for opt in state.optimizers],
        "schedulers": [(s, copy.deepcopy(s.state_dict())) for s in state.schedulers],
        "tensors": [(t, _clone(t)) for t in state.tensors],
    }
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return Snapshot(values, (torch.get_rng_state(), cuda))


def restore(snap: Snapshot) -> None:
    """Put the state back as the snapshot has it (parameters, buffers and inputs in place, so
    whatever holds them holds the restored values) and the random generators' states."""
    with torch.no_grad():
        for p, value, grad in snap.values["params"]:
            p.copy_(value)
            p.grad = None if grad is None else grad.clone()
        for t, value in snap.values["buffers"] + snap.values["tensors"]:
            t.copy_(value)
    for opt, st, groups in snap.values["optimizers"]:
        opt.state.clear()
        for p, entries in st.items():
            opt.state[p] = {k: _clone(v) for k, v in entries.items()}
        for group, saved in zip(opt.param_groups, groups):
            group.update({k: _clone(v) for k, v in saved.items()})
    for s, saved in snap.values["schedulers"]:
        s.load_state_dict(copy.deepcopy(saved))
    cpu, cuda = snap.rng
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


@dataclass(frozen=True)
class CheckResult:
    """A live step against a plain one from the same state: how many values were compared (tensors
    bitwise, the rest by ==) and the names of those that differ."""

    compared: int
    differing: tuple[str, ...]

    @property
    def equal(self) -> bool:
        return not self.differing

    def to_dict(self) -> dict:
        return {"compared": self.compared, "equal": self.equal, "differing": list(self.differing)}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and same_bits(a, b)
    try:
        return bool(a == b)
    except (RuntimeError, ValueError):  # containers of tensors
        return repr(a) == repr(b)


def compare(live: dict[str, object], plain_values: dict[str, object]) -> CheckResult:
    names = sorted(live.keys() | plain_values.keys())
    differing = tuple(n for n in names if n not in live or n not in plain_values
                      or not _same(live[n], plain_values[n]))
    return CheckResult(len(names), differing)
