"""A cheap lower bound on any schedule's recompute, for traces too large for the MILP (the LSTM's 8,063
operators): at each stage boundary, the bytes that must go and the cheapest recomputations that let them.

When stage k's operator runs, an item made before and read by a later first computation (it crosses
the boundary) is either resident or made again after the boundary, at its maker's cost at least.
"""

from __future__ import annotations

import numpy as np

from ..trace.lower import Program
from .graph import item_graph


def crossing_bound_ns(program: Program, budget_bytes: int) -> float:
    """The largest, over stage boundaries, of the least recompute (fractional knapsack: a maker's whole
    cost buys all its crossing bytes) that brings the crossing items within the budget's room. inf when
    some boundary cannot be met even with every crossing item dropped."""
    g = item_graph(program)
    T = g.n_stages
    size = g.item_bytes
    made = g.op_stage[g.item_op]
    last_read = np.full(g.n_items, -1, np.int64)
    for o in g.stage_op.tolist():
        for i in g.op_ins[o]:
            last_read[i] = max(last_read[i], int(g.op_stage[o]))
    last_read[g.pinned] = T
    bytes_items = np.flatnonzero(size > 0)
    best = 0.0
    cost = g.op_cost_ns.astype(float)
    for k, o in enumerate(g.stage_op.tolist()):
        ins, outs = set(g.op_ins[o]), set(g.op_outs[o])
        fixed = int(g.const_bytes[k]) + int(size[list(ins - outs)].sum()) + int(g.op_out_bytes[o])
        room = budget_bytes - fixed
        if room < 0:
            return float("inf")
        crossing = bytes_items[(made[bytes_items] < k) & (last_read[bytes_items] > k)]
        crossing = np.array([i for i in crossing.tolist() if i not in ins], dtype=np.int64)
        need = int(size[crossing].sum()) - room if len(crossing) else -1
        if need <= 0:
            continue
        makers, where = np.unique(g.item_op[crossing], return_inverse=True)
        freed = np.bincount(where, weights=size[crossing].astype(float))
        price = cost[makers]
        order = np.argsort(price / freed, kind="stable")
        total = 0.0
        for j in order.tolist():
            if need <= freed[j]:
                total += price[j] * need / freed[j]
                need = 0
                break
            total += price[j]
            need -= freed[j]
        if need > 0:
            return float("inf")
        best = max(best, total)
    return best
