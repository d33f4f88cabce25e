"""A whole-step graph lowered into the Program the simulator runs: one operator per FX node, costs
and sizes from one measured pass of the graph itself, storages by identity (a view shares its base's).

Owns the correspondence between the graph's nodes and the Program's operators and tensors (GraphMap),
which the rewrite reads a schedule through.
"""

from __future__ import annotations

import hashlib
import operator
import time
from dataclasses import dataclass

import torch
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from ..trace.lower import Lowering, Program
from ..trace.read import Call, Constant, Release
from .graph import NotStageable

# A Python number a node makes (Adam's step count as a float, the bias corrections), or a None among
# a node's results: held by the graph as a value. The model gives it these bytes; the measured peak
# counts tensors only.
SCALAR_BYTES = 8


@dataclass(frozen=True, eq=False)
class GraphMap:
    """Which node each operator is, and which node (and which of its results) each tensor is.

    op_node[i]: operator i's node; tensor_of[node]: the tensor id of a single-result node, or of each
    getitem of a multi-result one; random[i]: operator i draws random numbers (and on which device)."""

    op_node: tuple[Node, ...]
    tensor_of: dict
    out_index: tuple[int, ...]  # per tensor: which result of its operator's node (-1: the node's value itself)
    random: dict  # op index -> torch.device of the generator it draws from
    measured_ns: int  # the measured pass's wall time, all nodes


def _tensors_in(value) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def _storage_key(t: torch.Tensor):
    s = t.untyped_storage()
    return (s.device, s.data_ptr()) if s.nbytes() else None


def is_random(node: Node) -> bool:
    """A node whose operator draws from a generator (dropout's bernoulli, randn...)."""
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


@torch.no_grad()  # the graph holds the backward itself: autograd must not record (nor keep) anything
def measure(gm: GraphModule, inputs: list, repeat: int = 1) -> tuple[dict, dict]:
    """Run the graph node by node with every value kept (so no address is reused and aliases are
    told by storage identity), `repeat` timed passes after one warm-up; the global RNG is put back
    after, so the measurement draws nothing the user's next step would. Returns each node's value
    and its median time (ns)."""
    nodes = list(gm.graph.nodes)
    times: dict[Node, list[int]] = {n: [] for n in nodes}
    cpu_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        for r in range(repeat + 1):
            env: dict[Node, object] = {}
            it = iter(inputs)
            for n in nodes:
                if n.op == "placeholder":
                    env[n] = next(it)
                elif n.op == "get_attr":
                    env[n] = getattr(gm, n.target)
                elif n.op == "call_function":
                    args = torch.fx.node.map_arg(n.args, env.__getitem__)
                    kwargs = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
                    sync(_tensors_in(args))
                    t0 = time.perf_counter_ns()
                    env[n] = n.target(*args, **kwargs)
                    sync(_tensors_in(env[n]))
                    if r:
                        times[n].append(time.perf_counter_ns() - t0)
                elif n.op == "output":
                    pass
                else:
                    raise NotStageable(f"the step's graph has a node dtrlab cannot lower ({n.op} {n.target})")
    finally:
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
    median = {n: sorted(ts)[len(ts) // 2] for n, ts in times.items() if ts}
    return env, median


def sync(tensors: list[torch.Tensor]) -> None:
    if any(t.is_cuda for t in tensors):
        torch.cuda.synchronize()


def lower_graph(gm: GraphModule, inputs: list, name: str = "staged-step", repeat: int = 1,
                unit_cost_ns: int | None = None) -> tuple[Program, GraphMap]:
    """The Program of `gm` run on `inputs`: placeholders and constants are CONSTANTs; each other node
    an operator whose results are its tensors (a Python number counts SCALAR_BYTES); a result on an
    argument's storage is an ALIAS of it; a value is RELEASEd after its last use unless an output."""
    t0 = time.perf_counter_ns()
    env, median = measure(gm, inputs, repeat)
    measured_ns = time.perf_counter_ns() - t0
    lowering = Lowering(name, strict=True)
    nodes = list(gm.graph.nodes)
    out_node = nodes[-1]
    outputs = set(out_node.all_input_nodes)
    last_use: dict[Node, int] = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            last_use[a] = i
    tensor_of: dict[Node, int] = {}
    name_of: dict[int, str] = {}
    out_index: list[int] = []
    op_node: list[Node] = []
    random: dict[int, torch.device] = {}
    multi: dict[Node, list[int]] = {}  # a multi-result node's tensors
    constant_keys: set = set()  # the storages of the constants lowered so far
    canon = []

    def tensor_args(n: Node) -> list[Node]:
        return [a for a in pytree.tree_leaves((n.args, n.kwargs)) if isinstance(a, Node)]

    # The constants come first, whatever their place in the graph: the caller holds the inputs and the
    # module its attributes from before the first node runs. A node's line stays its place.
    constants_first = sorted(enumerate(nodes, start=1), key=lambda ln: ln[1].op not in ("placeholder", "get_attr"))
    for line, n in constants_first:
        if n.op in ("placeholder", "get_attr"):
            value = env[n]
            if not isinstance(value, torch.Tensor):
                raise NotStageable(f"the step's graph takes a value that is not a tensor ({n.target})")
            # Two of the graph's constants on one storage (make_fx lifts a tensor the step closes over
            # once per use) hold its bytes once: the second takes none.
            key = _storage_key(value)
            size = 0 if key in constant_keys else value.untyped_storage().nbytes()
            constant_keys.add(key)
            t = lowering.constant(Constant(line, n.name), size)
            tensor_of[n], name_of[t] = t, n.name
            out_index.append(-1)
            op_node.append(n)
            canon.append(f"{n.op} {n.name} {size}")
            continue
        if n.op == "output":
            break
        if n.target is operator.getitem and isinstance(n.args[0], Node) and n.args[0] in multi:
            parent, k = n.args[0], n.args[1]
            tensor_of[n] = multi[parent][k]
            if not n.users and n not in outputs:
                _release(lowering, line, n, tensor_of, name_of)
            continue
        value = env[n]
        arg_nodes = tensor_args(n)
        args = [tensor_of[a] for a in arg_nodes]
        arg_keys = [(_storage_key(env[a]) if isinstance(env[a], torch.Tensor) else None) for a in arg_nodes]
        if isinstance(value, torch.Tensor):
            results = [value]
        elif isinstance(value, (tuple, list)) and value and all(x is None or isinstance(x, torch.Tensor) for x in value):
            results = list(value)  # a None result (a gradient not asked for) is held as a Python value
        elif isinstance(value, (int, float, bool)):
            results = [None]
        else:
            raise NotStageable(f"the step's graph has a node whose value dtrlab cannot hold ({n.target}: "
                               f"{type(value).__name__})")
        sizes, aliases = [], []
        for r in results:
            if r is None:
                sizes.append(SCALAR_BYTES)
                aliases.append(-1)
                continue
            key = _storage_key(r)
            alias = arg_keys.index(key) if key is not None and key in arg_keys else -1
            sizes.append(0 if alias >= 0 else r.untyped_storage().nbytes())
            aliases.append(alias)
        names = [n.name] if len(results) == 1 and not isinstance(value, (tuple, list)) else \
            [f"{n.name}[{k}]" for k in range(len(results))]
        cost = unit_cost_ns if unit_cost_ns is not None else max(1, median.get(n, 1))
        outs = lowering.call(Call(line, str(n.target), tuple(name_of[a] for a in args), tuple(names), cost),
                             sizes, aliases, args)
        op = len(op_node)
        op_node.append(n)
        if is_random(n):
            random[op] = results[0].device if results[0] is not None else torch.device("cpu")
        for t, nm in zip(outs, names):
            name_of[t] = nm
        if isinstance(value, (tuple, list)):
            multi[n] = outs
            out_index.extend(range(len(outs)))
        else:
            tensor_of[n] = outs[0]
            out_index.append(-1)
        canon.append(f"{n.target} {args} {sizes} {aliases} {cost}")
        # Releases: each argument whose last use this is (not an output, not a constant), then any
        # result no one uses.
        for a in dict.fromkeys(arg_nodes):
            if last_use.get(a) == line - 1 and a not in outputs and a.op not in ("placeholder", "get_attr"):
                _release(lowering, line, a, tensor_of, name_of)
        if n not in last_use and n not in outputs:
            _release(lowering, line, n, tensor_of, name_of)
        if isinstance(value, (tuple, list)):  # results no getitem takes die with the node
            taken = {u.args[1] for u in n.users if u.target is operator.getitem}
            for k, t in enumerate(outs):
                if k not in taken:
                    lowering.release(Release(line, name_of[t]))
    lowering.pin_outputs()
    sha = hashlib.sha256("\n".join(canon).encode()).hexdigest()
    program = lowering.builder.finish(name, sha)
    gmap = GraphMap(tuple(op_node), tensor_of, tuple(out_index), random, measured_ns)
    return program, gmap


def _release(lowering: Lowering, line: int, node: Node, tensor_of: dict, name_of: dict) -> None:
    if node in tensor_of:
        lowering.release(Release(line, name_of[tensor_of[node]]))
