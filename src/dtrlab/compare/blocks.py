"""A model's blocks, and running them checkpointed: the unit torch.utils.checkpoint works on.

Owns the rule that finds blocks (find_blocks) and the context that makes each block's forward a
checkpointed one (checkpointed), whole-block recompute or selective (a policy of operators to save).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

# What selective activation checkpointing keeps: the matmuls and convolutions (the costly operators
# to run again); everything else in a block is recomputed in the backward.
SAVED_OPS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
             torch.ops.aten.convolution.default)


def _callable(m: nn.Module) -> bool:
    """A module with a forward of its own (a ModuleList is only a container)."""
    return type(m).forward is not nn.Module.forward


def _kind(m: nn.Module) -> tuple:
    """What makes two modules the same block: their class, and for a generic Sequential the classes
    of its children too (ResNet's stem and its stack of blocks are both Sequentials, not alike)."""
    if type(m) is nn.Sequential:
        return (nn.Sequential, tuple(type(k) for k in m.children()))
    return (type(m),)


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The outermost repeated composite submodules: walking down from the model, the children of a
    module that holds at least two children of one kind (_kind), each with submodules of its own and
    a forward (ResNet's basic blocks, a Transformer's layers, U-Net's double convolutions, DenseNet's
    dense layers and transitions). A block is not searched further; an empty list: the model
    exposes no blocks."""
    blocks: list[nn.Module] = []
    stack = [model]
    while stack:
        m = stack.pop()
        kids = list(m.children())
        by_kind: dict[tuple, list[nn.Module]] = {}
        for k in kids:
            if _callable(k) and any(True for _ in k.children()):
                by_kind.setdefault(_kind(k), []).append(k)
        chosen = {id(k) for group in by_kind.values() if len(group) >= 2 for k in group}
        blocks += [k for k in kids if id(k) in chosen]
        stack += [k for k in reversed(kids) if id(k) not in chosen]
    order = {id(m): i for i, m in enumerate(model.modules())}
    return sorted(blocks, key=lambda b: order[id(b)])


def sac_context():
    """The pair of contexts selective checkpointing runs a block under: save SAVED_OPS' results."""
    return create_selective_checkpoint_contexts(list(SAVED_OPS))


def _checkpoint(forward, options: dict, *args, **kwargs):
    # The recomputation calls `forward` again on the same argument objects: a list the caller appends
    # to after the call (DenseNet's features) would then be longer. Lists are taken as they are now.
    args = tuple(list(a) if isinstance(a, list) else a for a in args)
    return checkpoint(forward, *args, **options, **kwargs)


@contextlib.contextmanager
def checkpointed(blocks: list[nn.Module], selective: bool = False) -> Iterator[None]:
    """Inside: each block's forward runs through torch.utils.checkpoint (non-reentrant), saving only
    its inputs, or with `selective` its inputs and SAVED_OPS' results; the forwards are put back after."""
    kwargs = {"use_reentrant": False}
    if selective:
        kwargs["context_fn"] = sac_context
    for b in blocks:
        if "forward" in b.__dict__:
            raise ValueError(f"block {type(b).__name__} already has its forward replaced")
        b.forward = functools.partial(_checkpoint, type(b).forward.__get__(b), kwargs)
    try:
        yield
    finally:
        for b in blocks:
            b.__dict__.pop("forward", None)
