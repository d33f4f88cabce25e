"""A starting point for the solver: any valid schedule (DTR's run at the same budget) read as a solution
of the relaxation, whose objective is then at most that schedule's recompute.

A stage's R is 1 when the schedule computes the operator again in it; S when the item is resident (a
view: defined) right after the previous stage's operator ran.
"""

from __future__ import annotations

import numpy as np

from ..schedule.format import COMPUTE, Schedule
from ..trace.lower import Program
from .graph import ItemGraph
from .model import Milp


def start_of_schedule(program: Program, g: ItemGraph, m: Milp, schedule: Schedule) -> np.ndarray:
    """Column values of `m` (built without exact stages) that `schedule` implies."""
    x = np.zeros(m.n_cols)
    n_items = g.n_items
    storage_items: dict[int, list[int]] = {}  # a freed storage takes its views with it
    for i in range(n_items):
        storage_items.setdefault(int(g.item_storage[i]), []).append(i)
    op_stage = g.op_stage.tolist()
    live = np.zeros(n_items, bool)  # resident (a view: defined)
    stage = 0  # the stage whose recomputations are under way
    next_op = 0
    for kind, target in zip(schedule.kind.tolist(), schedule.target.tolist()):
        if kind == COMPUTE:
            o = target
            first = o == next_op
            if first:
                next_op += 1
            k = op_stage[o]
            if first and k >= 0:
                stage = k
            elif not first:
                c = m.r_cols.get((stage, o))
                if c is not None:
                    x[c] = 1
            for i in g.op_outs[o]:
                live[i] = True
            if first and k >= 0:
                for i in np.flatnonzero(live).tolist():
                    c = m.s_cols.get((k + 1, i))
                    if c is not None:
                        x[c] = 1
                stage = k + 1
        else:
            for i in storage_items.get(target, ()):
                live[i] = False
    return x
