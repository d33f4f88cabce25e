"""The graph a solver works on: stages (one per non-constant operator, in program order) over items, the
storages a schedule may free and the views of them (alias tensors), and how long each can be of use.

Constants and zero-byte storages cost nothing to keep and are never freed, so they and their views
leave the model. A view is defined only while its storage stays resident since the view was made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.lower import PIN, Program


@dataclass(frozen=True, eq=False)
class ItemGraph:
    """What the model needs of a Program. Stage k computes operator `stage_op[k]` for the first time;
    stage `n_stages` is the end, where the pinned outputs must be resident."""

    n_stages: int
    stage_op: np.ndarray  # int32: operator of each stage
    op_stage: np.ndarray  # int32 per operator: its stage, -1 for a constant
    op_cost_ns: np.ndarray  # int64
    op_out_bytes: np.ndarray  # int64: bytes of an operator's own outputs (room it needs while it runs)
    op_ins: tuple[tuple[int, ...], ...]  # per operator: items it reads (a view's storage item too)
    op_outs: tuple[tuple[int, ...], ...]  # per operator: items it makes
    item_bytes: np.ndarray  # int64: a storage's bytes; 0 for a view
    item_op: np.ndarray  # int32: the operator that makes the item
    item_storage: np.ndarray  # int32: the program storage (a view's: the storage it is a view of)
    item_base: np.ndarray  # int32: a view's storage item; a storage item's own index
    pinned: np.ndarray  # bool per item: must be resident at the end
    horizon: np.ndarray  # int32 per item: the last stage at which it can be of use
    const_bytes: np.ndarray  # int64, n_stages + 1: constant bytes resident while stage k runs

    @property
    def n_items(self) -> int:
        return len(self.item_bytes)

    def out_horizon(self, op: int) -> int:
        """The last stage at which recomputing `op` can help (-1: never)."""
        return max((int(self.horizon[i]) for i in self.op_outs[op]), default=-1)


def item_graph(program: Program) -> ItemGraph:
    n_ops = program.n_ops
    const = program.op_constant
    t_storage, t_alias, t_op = program.tensor_storage, program.tensor_alias_arg, program.tensor_op
    s_bytes = program.storage_size_bytes.astype(np.int64)
    storage_op = t_op[program.storage_root]
    modelled = ((~const[storage_op]) & (s_bytes > 0)).tolist()

    stage_op = np.flatnonzero(~const).astype(np.int32)
    n_stages = len(stage_op)
    op_stage = np.full(n_ops, -1, np.int32)
    op_stage[stage_op] = np.arange(n_stages, dtype=np.int32)

    # Items: each tensor of a modelled storage (its root is the storage item, the others views).
    tensor_item = np.full(program.n_tensors, -1, np.int64)
    item_bytes, item_op, item_storage, item_base = [], [], [], []
    storage_item: dict[int, int] = {}
    for t, s in enumerate(t_storage.tolist()):
        if not modelled[s]:
            continue
        tensor_item[t] = len(item_bytes)
        view = int(t_alias[t]) >= 0
        if not view:
            storage_item[s] = len(item_bytes)
        item_bytes.append(0 if view else int(s_bytes[s]))
        item_op.append(int(t_op[t]))
        item_storage.append(s)
        item_base.append(storage_item[s])  # a storage's root comes before its views

    op_ins, op_outs, op_out_bytes = [], [], np.zeros(n_ops, np.int64)
    items_of = tensor_item.tolist()
    for o in range(n_ops):
        ins: set[int] = set()
        for a in program.args_of(o).tolist():
            i = items_of[a]
            if i >= 0:
                ins.update((i, item_base[i]))
        start, n = int(program.op_out_start[o]), int(program.op_n_out[o])
        op_out_bytes[o] = int(program.tensor_size_bytes[start:start + n].sum())
        op_ins.append(tuple(sorted(ins)))
        op_outs.append(tuple(sorted({items_of[t] for t in range(start, start + n) if items_of[t] >= 0})))

    n_items = len(item_bytes)
    consumers: list[list[int]] = [[] for _ in range(n_items)]
    for o, ins in enumerate(op_ins):
        for i in ins:
            consumers[i].append(o)
    pinned = np.zeros(n_items, bool)
    for t in program.step_target[program.step_kind == PIN].tolist():
        i = items_of[t]
        if i >= 0:
            pinned[i] = pinned[item_base[i]] = True  # a pinned view needs its storage at the end

    # An item is of use up to its last reader's stage, or up to the last stage at which one of its
    # readers may be recomputed (its outputs still of use), or to the end if pinned.
    horizon = np.full(n_items, -1, np.int32)
    for o in range(n_ops - 1, -1, -1):
        for i in op_outs[o]:
            h = n_stages if pinned[i] else int(op_stage[o])
            for c in consumers[i]:
                h = max(h, int(op_stage[c]), max((int(horizon[x]) for x in op_outs[c]), default=-1))
            horizon[i] = h

    const_sizes = np.zeros(n_ops, np.int64)
    const_storages = np.flatnonzero(const[storage_op])
    np.add.at(const_sizes, storage_op[const_storages], s_bytes[const_storages])
    made_by = np.cumsum(const_sizes)  # constant bytes made at or before each operator
    const_bytes = np.append(made_by[stage_op], made_by[-1]).astype(np.int64)

    i32 = np.int32
    return ItemGraph(n_stages, stage_op, op_stage, program.op_cost_ns.astype(np.int64), op_out_bytes,
                     tuple(op_ins), tuple(op_outs), np.array(item_bytes, np.int64), np.array(item_op, i32),
                     np.array(item_storage, i32), np.array(item_base, i32), pinned, horizon, const_bytes)
