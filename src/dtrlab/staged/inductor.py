"""The staged graph compiled by torch.compile's inductor: the "inductor" way of running a plan.

Owns the compile settings and how close the result must be. The rewritten GraphModule (the schedule's
recomputations and frees in place) goes through dynamo and inductor as it is, under settings that keep
the schedule's meaning:
- no common-subexpression elimination (AOT autograd's `cse`): a recomputation is a copy of its node,
  and merging it with the first computation would keep that value alive across the schedule's free;
- random operators through ATen's own kernels (inductor's `fallback_random`): the same numbers as the
  eager step and as the GraphModule, where inductor's own generator would draw others;
- no fusion (`max_fusion_size` 1): a fused kernel runs nodes the schedule keeps apart together, and
  on the test MLP at ratio 0.8 fusion took the peak 38% over the budget (1,947,436 B against
  1,414,809; 1,231,968 without fusion: docs/staged.md);
- the schedule's order kept (inductor's `reorder_for_locality` and `reorder_for_peak_memory` off):
  reordered, recomputations move next to their first users, and on the test MLP at 0.5 the peak
  was 2.6 times the budget;
- a number read out of a tensor stays inside the graph (`capture_scalar_outputs`: Adam's step count);
- every random operator explicit (explicit_rng): dynamo does not trace the generator's state, and the
  GraphModule's saves and replays of it would split the graph, each piece's inputs alive to its end.
  So each random operator runs through PyTorch's `run_with_rng_state` from a state the graph takes as
  an input, and a pre-pass before the graph draws what the step's random operators draw, in order,
  taking the state before each: the same numbers as the eager step, the generator left where it
  leaves it, and one graph;
- one compile thread (no pool of workers on a shared machine).
Inductor fuses and reorders floating-point sums, so its results are close, not bitwise
(GRAD_TOLERANCE); and it may place kernels in another order than the schedule's, so its peak is
measured (measure.allocator_peak_bytes), never taken from the plan.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_arg

# How close an inductor-compiled step is to eager: the largest difference over all of a step's
# tensors (gradients, updated parameters, optimizer state), relative to the largest value among them.
# Inductor fuses and reorders floating-point sums, so bits differ; a convolution's bias before a batch
# norm has a gradient of rounding noise only, so a tensor-by-tensor relative bound would mean nothing.
# Where a step has a sum that cancels (a convolution's weight gradient before a batch norm, on the zoo's
# default ResNet-32 and U-Net) inductor's own numerics exceed it, as torch.compile's of the plain step
# do (docs/staged.md, "How close").
GRAD_TOLERANCE = 1e-4


def max_relative_difference(want: list[torch.Tensor], got: list[torch.Tensor]) -> float:
    """The largest elementwise difference between `want` and `got` (floating-point tensors, pairwise),
    over the largest magnitude in `want`: what GRAD_TOLERANCE bounds. Infinite if the two differ in
    length, shape or dtype."""
    if len(want) != len(got) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(want, got)):
        return float("inf")
    pairs = [(a, b) for a, b in zip(want, got) if a.is_floating_point() and a.numel()]
    if not pairs:
        return 0.0
    scale = max(a.abs().max().item() for a, _ in pairs) or 1.0
    return max((a.double() - b.double()).abs().max().item() for a, b in pairs) / scale


def settings() -> contextlib.ExitStack:
    """The settings a staged graph is compiled and run under (above), patched for its calls only."""
    from torch._dynamo import config as dynamo_config
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    stack = contextlib.ExitStack()
    stack.enter_context(functorch_config.patch(cse=False))
    stack.enter_context(inductor_config.patch(fallback_random=True, max_fusion_size=1, reorder_for_locality=False,
                                              reorder_for_peak_memory=False, compile_threads=1))
    stack.enter_context(dynamo_config.patch(capture_scalar_outputs=True))
    return stack


def _random_op(n: Node) -> tuple:
    """(the random operator, its arguments) of a first computation or of a replay (rewrite.py)."""
    from .rewrite import replayed_op

    replayed = replayed_op(n)
    return (replayed, n.args[1:]) if replayed is not None else (n.target, n.args)


def explicit_rng(gm: GraphModule, random: dict) -> tuple[GraphModule, list[Node]]:
    """`gm` (a rewritten graph; `random`: its random operators' program ids -> device) with every random
    operator's computations run by run_with_rng_state from a state input of its own (after the graph's
    inputs, one a random operator, in the order of their first computations), the saved states gone;
    and those first computations, which pre_pass draws."""
    from torch._prims.rng_prims import run_with_rng_state

    from .rewrite import saves_rng

    computations = [n for n in gm.graph.nodes if n.op == "call_function" and n.meta.get("dtrlab_op") in random
                    and not saves_rng(n)]
    firsts: dict[int, Node] = {}
    for n in computations:
        firsts.setdefault(n.meta["dtrlab_op"], n)
    g, env = Graph(), {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = g.node_copy(n)
    states = {x: g.placeholder(f"rng_state_{k}") for k, x in enumerate(firsts)}
    chosen = set(computations)
    for n in gm.graph.nodes:
        if n.op == "placeholder" or saves_rng(n):
            continue
        if n not in chosen:
            env[n] = g.node_copy(n, env.__getitem__)
            continue
        op, args = _random_op(n)
        env[n] = g.call_function(run_with_rng_state, (states[n.meta["dtrlab_op"]], op) + map_arg(args, env.__getitem__),
                                 map_arg(n.kwargs, env.__getitem__))
        env[n].meta.update(n.meta)
    g.lint()
    return GraphModule(gm, g), list(firsts.values())


def _zeros_like_value(a):
    if isinstance(a, Node):
        v = a.meta["val"]
        return torch.zeros(v.shape, dtype=v.dtype, device=v.device)  # zeros: a valid probability too
    return a


def pre_pass(firsts: list[Node], random: dict) -> list[torch.Tensor]:
    """The generator's state before each random operator's first computation, drawn in order as the
    graph would (each operator run on zeros of its arguments' shapes and types: how much it draws
    depends on them, not on their values); the generator left after the last, where the step leaves it."""
    from .rewrite import rng_access

    states = []
    for n in firsts:
        get, _ = rng_access(torch.device(random[n.meta["dtrlab_op"]]))
        states.append(get())
        op, args = _random_op(n)
        op(*map_arg(args, _zeros_like_value), **map_arg(n.kwargs, _zeros_like_value))
    return states


def compiled(module: GraphModule, random: dict) -> Callable:
    """`module` (a rewritten graph; `random` its random operators, rewrite.py's gmap.random) compiled by
    inductor on its first call, each call under settings(), its random operators explicit."""
    graph, firsts = explicit_rng(module, random)
    fn = torch.compile(graph, backend="inductor", dynamic=False)

    def run(*inputs):
        with settings():
            states = pre_pass(firsts, random)
            return fn(*inputs, *states)
    run.compiled_from = module
    return run
