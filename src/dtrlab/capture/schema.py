"""What an aten operator's schema says about its tensors: which arguments it writes in place.

Owns the one reading of schemas shared by the trace recorder and the live package.
"""

from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_flatten

# Operators whose schema hides a mutation: eager batch norm updates its running statistics
# in place (arguments 3 and 4) when training, though its schema marks no argument as written.
_HIDDEN_MUTATIONS = {"aten.native_batch_norm.default": (3, 4), "aten.cudnn_batch_norm.default": (3, 4),
                     "aten.miopen_batch_norm.default": (3, 4)}


@functools.lru_cache(maxsize=None)
def _writes(func) -> tuple[tuple[tuple[int, str, bool], ...], bool]:
    """The schema's written arguments, (position, name, hidden) each, and whether the operator's
    name is an in-place one's: read once per operator."""
    hidden_of = _HIDDEN_MUTATIONS.get(str(func), ())
    written = tuple((i, a.name, i in hidden_of) for i, a in enumerate(func._schema.arguments)
                    if i in hidden_of or (a.alias_info is not None and a.alias_info.is_write))
    return written, func._schema.name.endswith("_")


def written_tensors(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors (objects among args and kwargs) that the operator writes in place, each once."""
    positions, inplace_name = _writes(func)
    if not positions and not inplace_name:
        return []
    written: list[torch.Tensor] = []
    for i, name, hidden in positions:
        value = args[i] if i < len(args) else kwargs.get(name)
        if hidden and not (len(args) > 5 and args[5]):  # batch norm writes only when training
            continue
        vs, _ = tree_flatten(value)
        written.extend(v for v in vs if isinstance(v, torch.Tensor))
    if not written and inplace_name:
        first = next((v for v in tree_flatten((args, kwargs))[0] if isinstance(v, torch.Tensor)), None)
        if first is not None:
            written = [first]  # an in-place operator whose schema does not say so
    out: list[torch.Tensor] = []
    for w in written:
        if not any(w is o for o in out):
            out.append(w)
    return out
