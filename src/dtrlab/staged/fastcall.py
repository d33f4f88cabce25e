"""The rewritten graph's own code, with each ATen operator called at its C++ entry: the "graph" way of
running a plan, at less Python cost a node.

Owns only that binding. FX's generated code spells every operator `torch.ops.aten.NAME.OVERLOAD(...)`:
four attribute lookups and OpOverload.__call__'s frame (which only calls the operator's `_op`) for
each of a step's thousands of calls (DenseNet's 3,870), where eager runs its backward in autograd's
C++ engine. The same source, each spelling bound instead to a global holding that `_op`, is the same
code in every other way: the same calls in the same order, each value dropped after its last use.
"""

from __future__ import annotations

import re
from typing import Callable

import torch
from torch.fx import GraphModule
from torch.fx.node import _get_qualified_name


def fast_forward(gm: GraphModule) -> Callable:
    """A function running `gm` as its generated forward does, with each OpOverload call bound to the
    overload's C++ entry (its `_op`); `gm` is its `self` (its constants are read from it)."""
    code = gm.graph.python_code(root_module="self")
    src, scope = code.src, dict(code.globals)
    overloads = {n.target for n in gm.graph.nodes
                 if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)}
    for k, op in enumerate(sorted(overloads, key=str)):
        name = f"_aten_entry_{k}"
        src = re.sub(r"(?<![\w.])" + re.escape(_get_qualified_name(op)) + r"(?=\()", name, src)
        scope[name] = op._op
    exec(compile(src, f"<dtrlab staged graph {id(gm):x}>", "exec"), scope)
    forward = scope["forward"]

    def run(*inputs):
        return forward(gm, *inputs)
    run.src = src  # what runs, for a reader (and the tests)
    return run
