"""Reading a solution of the stage model (model.py) as a schedule: per stage, its recomputations in
program order, then its operator; each storage freed right after its last use in the stage unless the
solution keeps it into the next. Also what each stage's events peak at, which says whether it fits.
"""

from __future__ import annotations

import numpy as np

from ..schedule.format import COMPUTE, FREE, Schedule
from ..trace.lower import Program
from .graph import ItemGraph
from .model import Milp


def schedule_from_solution(program: Program, g: ItemGraph, m: Milp, x: np.ndarray, made_by: str,
                           budget_bytes: int) -> tuple[Schedule, list[int]]:
    """The events a solution means, and the peak bytes of each stage as they run: per stage, the
    recomputations in program order then the stage's operator (constants at their place); each storage
    freed right after its last use in a stage unless the solution keeps it into the next. Only the R and
    S columns of `x` are read (they lead every model of `g`, so `x` may hold just those)."""
    T = g.n_stages
    recompute: list[list[int]] = [[] for _ in range(T + 1)]
    for (k, o), c in m.r_cols.items():
        if x[c] > 0.5:
            recompute[k].append(o)
    kept: list[set[int]] = [set() for _ in range(T + 2)]
    for (k, s), c in m.s_cols.items():
        if x[c] > 0.5:
            kept[k].add(s)
    kept[T + 1] = set(np.flatnonzero(g.pinned).tolist())
    size = g.item_bytes.tolist()
    storage = g.item_storage.tolist()
    out_bytes = g.op_out_bytes.tolist()
    const = program.op_constant.tolist()
    kind: list[int] = []
    target: list[int] = []
    peaks = [0] * (T + 1)
    resident: set[int] = set()  # storage items
    resident_bytes = 0
    next_op = 0

    def free(items) -> None:
        nonlocal resident_bytes
        for s in sorted(items):
            kind.append(FREE)
            target.append(storage[s])
            resident.discard(s)
            resident_bytes -= size[s]

    for k in range(T + 1):
        last = int(g.stage_op[k]) if k < T else program.n_ops
        while next_op < last:  # the constants made before this stage's operator
            assert const[next_op]
            kind.append(COMPUTE)
            target.append(next_op)
            next_op += 1
        comps = sorted(recompute[k]) + ([last] if k < T else [])
        next_op = last + 1 if k < T else next_op
        touched_later: list[set[int]] = [set() for _ in range(len(comps) + 1)]
        for i in range(len(comps) - 1, -1, -1):
            o = comps[i]
            touched_later[i] = touched_later[i + 1] | set(g.op_ins[o]) | set(g.op_outs[o])
        free({s for s in resident if s not in touched_later[0] and s not in kept[k + 1]})
        for i, o in enumerate(comps):
            kind.append(COMPUTE)
            target.append(o)
            peaks[k] = max(peaks[k], int(g.const_bytes[k]) + resident_bytes + out_bytes[o])
            for s in g.op_outs[o]:
                if size[s] and s not in resident:
                    resident.add(s)
                    resident_bytes += size[s]
            touched = set(g.op_ins[o]) | set(g.op_outs[o])
            free({s for s in touched if s in resident and s not in touched_later[i + 1] and s not in kept[k + 1]})
    schedule = Schedule(np.array(kind, np.int8), np.array(target, np.int32), program.sha256, made_by, budget_bytes)
    return schedule, peaks


def over_budget(peaks: list[int], budget_bytes: int) -> set[int]:
    """The stages whose peak (schedule_from_solution's) crosses the budget."""
    return {k for k, peak in enumerate(peaks) if peak > budget_bytes}


__all__ = ["schedule_from_solution", "over_budget"]
