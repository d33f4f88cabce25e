"""A schedule compiled into the step's graph: each computation a node in the schedule's order (a
recomputation a copy of its node), each free the end of the values on that storage.

Owns the rewrite and the replay of random numbers: a recomputed random node draws from the
generator state its first computation drew from, so it makes the same numbers.
"""

from __future__ import annotations

import operator

import numpy as np
import torch
from torch.fx import Graph, GraphModule, Node

from ..schedule.format import COMPUTE, Schedule
from ..trace.lower import Program
from .lower import GraphMap


def rng_access(device: torch.device):
    """(get, put) of the generator state of `device`'s default generator."""
    if device.type == "cuda":
        return (lambda: torch.cuda.get_rng_state(device)), (lambda s: torch.cuda.set_rng_state(s, device))
    return torch.get_rng_state, torch.set_rng_state


def save_rng_of(device: torch.device):
    """A function giving the generator state a random node is about to draw from (its first computation)."""
    get, _ = rng_access(device)

    def save_rng() -> torch.Tensor:
        return get()
    save_rng.saves_rng = True
    return save_rng


def saves_rng(node: Node) -> bool:
    """Whether `node` saves a generator state (save_rng_of) for later replays."""
    return node.op == "call_function" and getattr(node.target, "saves_rng", False)


def replayed_op(node: Node):
    """The random operator `node` replays from a saved state (replay_rng_of), or None."""
    return getattr(node.target, "target", None) if node.op == "call_function" else None


def replay_rng_of(device: torch.device, target):
    """A function running target(*args, **kwargs) drawing from a saved state, the global generator
    left as it was: a recomputation makes its first computation's numbers and takes none from later draws."""
    get, put = rng_access(device)

    def replay_rng(state: torch.Tensor, *args, **kwargs):
        now = get()
        put(state)
        try:
            return target(*args, **kwargs)
        finally:
            put(now)
    replay_rng.__name__ = replay_rng.__qualname__ = f"replay_rng_{target.__name__.replace('.', '_')}"
    replay_rng.target = target  # the random operator it replays
    return replay_rng


def rewrite(gm: GraphModule, program: Program, gmap: GraphMap, schedule: Schedule) -> GraphModule:
    """A GraphModule that runs `schedule` (valid for `program`, checked before): its nodes in the
    schedule's order. FX's generated code drops each value after its last use, and a free ends the
    use of every value on the storage (a later need finds a recomputed copy), so no value outlives
    the schedule's free of it."""
    g = Graph()
    kinds, targets = schedule.kind.tolist(), schedule.target.tolist()
    computes = np.bincount(schedule.target[schedule.kind == COMPUTE], minlength=program.n_ops)
    t_storage = program.tensor_storage.tolist()
    s_tensors: list[list[int]] = [[] for _ in range(program.n_storages)]
    for t, s in enumerate(t_storage):
        s_tensors[s].append(t)
    out_start, n_out = program.op_out_start.tolist(), program.op_n_out.tolist()
    current: dict[int, Node] = {}  # tensor id -> the node holding its value now
    rng_state: dict[int, Node] = {}  # random op -> the generator state of its first computation
    # Placeholders first, in order: they are the step's inputs (constants in the program).
    for i, node in enumerate(gmap.op_node):
        if node.op == "placeholder":
            current[out_start[i]] = g.placeholder(node.name)

    def value_of(node: Node) -> Node:
        t = gmap.tensor_of[node]
        try:
            return current[t]
        except KeyError:
            raise AssertionError(f"{node.name} is not resident: the schedule was not checked") from None

    for event, (kind, x) in enumerate(zip(kinds, targets)):
        if kind != COMPUTE:
            for t in s_tensors[x]:
                current.pop(t, None)
            continue
        node = gmap.op_node[x]
        first = out_start[x]
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            current[first] = g.get_attr(node.target)
            continue
        args = torch.fx.node.map_arg(node.args, value_of)
        kwargs = torch.fx.node.map_arg(node.kwargs, value_of)
        device = gmap.random.get(x)
        if device is not None and computes[x] > 1:
            if x not in rng_state:
                rng_state[x] = g.call_function(save_rng_of(device), ())
                new = g.call_function(node.target, args, kwargs)
            else:
                new = g.call_function(replay_rng_of(device, node.target), (rng_state[x],) + tuple(args), kwargs)
        else:
            new = g.call_function(node.target, args, kwargs)
        new.meta.update(node.meta)
        new.meta["dtrlab_op"], new.meta["dtrlab_event"] = x, event  # what the parity test reads
        if gmap.out_index[first] < 0:
            current[first] = new
            new.meta["dtrlab_tensor"] = first
        else:
            # The results not resident take a getitem; a result still resident keeps its value (the
            # new copy is dropped with the node's value).
            for k, t in enumerate(range(first, first + n_out[x])):
                if t not in current:
                    current[t] = g.call_function(operator.getitem, (new, k))
                    current[t].meta["dtrlab_tensor"] = t
    out = [n for n in gm.graph.nodes if n.op == "output"][0]
    g.output(torch.fx.node.map_arg(out.args[0], value_of))
    g.lint()
    return GraphModule(gm, g)
