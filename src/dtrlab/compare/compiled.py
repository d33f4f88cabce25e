"""torch.compile (inductor) under torch._functorch.config.activation_memory_budget, as a mode of the
comparison.

Owns the compiled runner; its peak is the allocator's count (staged/measure.py: inductor's generated
code allocates its buffers below the dispatcher, where the storage counter, peak.py, cannot follow it),
and its closeness to eager the staged inductor mode's GRAD_TOLERANCE. Plain eager counted the same way
(plain_allocator_peak_bytes) is the compiled peaks' yardstick.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config

from ..errors import DtrlabError
from ..staged.measure import allocator_peak_bytes
from .world import state_of, zoo_step

# Dynamo keeps at most this many compiled versions of one function's code before it runs it eagerly
# without a word; every model of a class compiled in one process is a version of its forward.
RECOMPILE_LIMIT = 64


def settings(budget: float) -> contextlib.ExitStack:
    """The settings a compiled step is made and run under, patched for its calls only: the partitioner's
    activation memory budget, one compile thread (no pool of compile workers on a shared machine), and
    room for every budget's version of the model's forward."""
    stack = contextlib.ExitStack()
    for patch in (functorch_config.patch(activation_memory_budget=budget), inductor_config.patch(compile_threads=1),
                  torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT)):
        stack.enter_context(patch)
    return stack


def compiled_runner(mode, world: Callable[[], None], budget: float | None = None, solver=None,
                    detail: Callable[[], str] = lambda: ""):
    """`world`'s model compiled in place (nn.Module.compile: its forward and, through AOT autograd, its
    backward; the loss and the optimizer's update stay eager) by inductor under `budget` (default:
    mode.setting) as the activation memory budget, and `solver` (if given) as the partitioner's knapsack
    solver. Its first step compiles; an error of dtrlab's raised inside the compilation (a solver's)
    comes out as itself, not wrapped in dynamo's.

    Each runner compiles through a backend of its own (inductor's compile_fx under its budget): dynamo
    matches a cached compilation to the backend that made it, so models of one class compiled under
    different budgets in one process never run each other's code (with one backend for all, every
    model ran the partition of whichever compiled first)."""
    from torch._inductor.compile_fx import compile_fx

    from .modes import Runner

    budget = mode.setting if budget is None else budget
    solving = {} if solver is None else {"activation_memory_budget_solver": solver}

    def backend(gm, example_inputs):
        with functorch_config.patch(activation_memory_budget=budget, **solving):
            return compile_fx(gm, example_inputs)

    world.model.compile(backend=backend)

    def run() -> None:
        with settings(budget):
            try:
                world()
            except torch._dynamo.exc.BackendCompilerFailed as e:
                if isinstance(e.inner_exception, DtrlabError):
                    raise e.inner_exception from None
                raise
    return Runner(mode, run, lambda: step_allocator_peak_bytes(run, world), peak_kind="allocator", detail=detail)


def step_allocator_peak_bytes(run: Callable[[], object], world: Callable[[], None]) -> int:
    """allocator_peak_bytes of one step `run` of `world` (compiled or not: plain eager counted this way
    is the compiled steps' yardstick). The model's gradients are dropped first, as the step's own
    zero_grad does first: the profiler could not see them freed inside."""
    for p in world.model.parameters():
        p.grad = None
    return allocator_peak_bytes(run, state_of(world))


def plain_allocator_peak_bytes(name: str, sizes: dict, seed: int = 0) -> int:
    """Plain eager's peak of `name`'s zoo step at `sizes` by the allocator's count (after two warm steps):
    the yardstick the compiled steps' peaks are read against."""
    world = zoo_step(name, sizes, seed)
    world()
    world()
    return step_allocator_peak_bytes(world, world)
