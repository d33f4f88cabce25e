"""The stage MILP of the best schedule under a budget, solver-neutral: columns, rows, and the maps back
to what each column means (R: an operator recomputed in a stage; S: an item kept into a stage).

Stage k recomputes some operators (each at most once, in program order) and ends with the first
computation of its own operator; the end stage recomputes what the pinned outputs need. Items are
storages (bytes, freed) and views of them (no bytes, defined while their storage stays). docs/optimal.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph import ItemGraph

BINARY, CONTINUOUS = True, False
FIRST = -1  # in place of a column: the stage's own first computation, always 1


@dataclass(frozen=True, eq=False)
class Milp:
    """min cost @ x subject to row_lb <= A x <= row_ub, col_lb <= x <= col_ub, x integral where col_int.

    Memory coefficients are bytes (exact integers); each solver scales them as it needs."""

    col_cost: np.ndarray  # int64 (ns of a recomputation)
    col_lb: np.ndarray  # int64
    col_ub: np.ndarray  # int64
    col_int: np.ndarray  # bool
    col_bytes: np.ndarray  # bool: the column counts bytes (a memory level), to be scaled with them
    row_ptr: np.ndarray  # int64, n_rows + 1
    row_idx: np.ndarray  # int32
    row_val: np.ndarray  # int64
    row_lb: np.ndarray  # float64 (-inf: none)
    row_ub: np.ndarray  # float64 (+inf: none)
    row_bytes: np.ndarray  # bool: the row is a memory balance (in bytes)
    r_cols: dict  # (stage, op) -> column
    s_cols: dict  # (stage, item) -> column
    infeasible: str | None  # why no schedule can exist at all (a budget below a fixed need), or None

    @property
    def n_cols(self) -> int:
        return len(self.col_cost)

    @property
    def n_rows(self) -> int:
        return len(self.row_lb)

    @property
    def n_binaries(self) -> int:
        return int(self.col_int.sum())


class _Builder:
    def __init__(self) -> None:
        self.cost, self.lb, self.ub, self.integer, self.bytes_ = [], [], [], [], []
        self.ptr, self.idx, self.val, self.rlb, self.rub, self.rbytes = [0], [], [], [], [], []

    def col(self, integer: bool, ub: int = 1, cost: int = 0, is_bytes: bool = False) -> int:
        self.cost.append(cost)
        self.lb.append(0)
        self.ub.append(ub)
        self.integer.append(integer)
        self.bytes_.append(is_bytes)
        return len(self.cost) - 1

    def row(self, terms: list[tuple[int, int]], lb: float, ub: float, is_bytes: bool = False) -> None:
        for c, v in terms:
            self.idx.append(c)
            self.val.append(v)
        self.ptr.append(len(self.idx))
        self.rlb.append(lb)
        self.rub.append(ub)
        self.rbytes.append(is_bytes)


INF = float("inf")


def build_milp(g: ItemGraph, budget_bytes: int, exact_stages: frozenset[int] = frozenset()) -> Milp:
    """The MILP of graph `g` under `budget_bytes` (constants included in the budget).

    Memory is held at each stage's first computation only (what is kept into the next stage, the
    operator's inputs and its outputs), a relaxation that every schedule satisfies, whatever the order
    or number of its recomputations; the stages in `exact_stages` also hold it at every recomputation,
    in program order, each storage freed after its last use in the stage (Checkmate's accounting)."""
    T = g.n_stages
    b = _Builder()
    cost = g.op_cost_ns.tolist()
    size = g.item_bytes.tolist()
    s_op = g.item_op.tolist()
    base = g.item_base.tolist()
    op_stage = g.op_stage.tolist()
    horizon = g.horizon.tolist()
    pinned = g.pinned.tolist()
    out_bytes = g.op_out_bytes.tolist()

    # R: operator o recomputed in stage k, for k after its first computation up to the last stage at
    # which one of its outputs can still be of use.
    r_cols: dict[tuple[int, int], int] = {}
    stage_recompute: list[list[int]] = [[] for _ in range(T + 1)]
    for o in g.stage_op.tolist():
        if not g.op_outs[o]:
            continue  # it makes no storage the model tracks: recomputing it never helps
        for k in range(op_stage[o] + 1, g.out_horizon(o) + 1):
            r_cols[k, o] = b.col(BINARY, cost=cost[o])
            stage_recompute[k].append(o)
    # S: item s resident (a view: defined) when stage k begins.
    s_cols: dict[tuple[int, int], int] = {}
    stage_kept: list[list[int]] = [[] for _ in range(T + 2)]
    for s in range(g.n_items):
        for k in range(op_stage[s_op[s]] + 1, horizon[s] + 1):
            s_cols[k, s] = b.col(BINARY)
            stage_kept[k].append(s)
            if base[s] != s:  # a view is kept only with its storage
                b.row([(s_cols[k, s], 1), (s_cols[k, base[s]], -1)], -INF, 0)

    def r_term(k: int, o: int):
        """R as a column, or FIRST for the stage's own first computation, or None."""
        if k < T and g.stage_op[k] == o:
            return FIRST
        return r_cols.get((k, o))

    infeasible = None
    for k in range(T + 1):
        cap = budget_bytes - int(g.const_bytes[k])
        if cap < 0 and infeasible is None:
            infeasible = f"the constants alone ({int(g.const_bytes[k]):,} bytes) exceed the budget"
        positions = sorted(stage_recompute[k]) + ([int(g.stage_op[k])] if k < T else [])
        # Retention: kept into k+1 only if resident in k (kept, or computed here).
        for s in stage_kept[k + 1] if k + 1 <= T else ():
            terms = [(s_cols[k + 1, s], 1)]
            if (k, s) in s_cols:
                terms.append((s_cols[k, s], -1))
            r = r_term(k, s_op[s])
            if r == FIRST:
                continue
            if r is not None:
                terms.append((r, -1))
            b.row(terms, -INF, 0)
        # Dependencies: every input resident when an operator runs.
        for o in positions:
            r = r_term(k, o)
            for s in g.op_ins[o]:
                terms = [] if r == FIRST else [(r, 1)]
                if (k, s) in s_cols:
                    terms.append((s_cols[k, s], -1))
                rp = r_term(k, s_op[s])
                if rp is not None:
                    terms.append((rp, -1))
                b.row(terms, -INF, -1 if r == FIRST else 0)
        if k in exact_stages:
            _exact_memory_rows(b, g, k, positions, r_term, s_cols, cap)
        elif k < T:
            why = _boundary_memory_row(b, g, k, s_cols, stage_kept[k + 1], cap)
            infeasible = infeasible or why
        if k == T:
            pinned_bytes = int(g.item_bytes[g.pinned].sum())
            if pinned_bytes > cap:
                infeasible = infeasible or (f"the outputs pinned at the end ({pinned_bytes:,} bytes) and the "
                                            f"constants ({int(g.const_bytes[k]):,} bytes) exceed the budget")
            for s in np.flatnonzero(g.pinned).tolist():
                terms = [(c, 1) for c in (s_cols.get((T, s)), r_cols.get((T, s_op[s]))) if c is not None]
                b.row(terms, 1, INF)

    i64 = np.int64
    return Milp(np.array(b.cost, i64), np.array(b.lb, i64), np.array(b.ub, i64), np.array(b.integer, bool),
                np.array(b.bytes_, bool), np.array(b.ptr, i64), np.array(b.idx, np.int32),
                np.array(b.val, i64), np.array(b.rlb, float), np.array(b.rub, float),
                np.array(b.rbytes, bool), r_cols, s_cols, infeasible)


def _boundary_memory_row(b: _Builder, g: ItemGraph, k: int, s_cols: dict, kept_next: list[int],
                         cap: int) -> str | None:
    """Memory when stage k's operator runs: its inputs and outputs, and all that is kept into stage k+1
    (resident then, and nothing but the operator's outputs is made in between). Returns why no schedule
    can exist when the operator alone does not fit."""
    o = int(g.stage_op[k])
    size = g.item_bytes.tolist()
    ins, outs = set(g.op_ins[o]), set(g.op_outs[o])
    fixed = sum(size[s] for s in ins - outs) + int(g.op_out_bytes[o])
    terms = [(s_cols[k + 1, s], size[s]) for s in kept_next if size[s] and s not in ins and s not in outs]
    b.row(terms, -INF, cap - fixed, is_bytes=True)
    if cap < fixed:
        return (f"operator {o} needs {fixed:,} bytes of inputs and outputs beside {int(g.const_bytes[k]):,} "
                f"bytes of constants")
    return None


def _exact_memory_rows(b: _Builder, g: ItemGraph, k: int, positions: list[int], r_term, s_cols: dict,
                       cap: int) -> None:
    """Memory at every computation of stage k: a running level through the stage, each storage freed
    after its last reader (or its maker) in the stage unless kept into k+1."""
    T = g.n_stages
    size = g.item_bytes.tolist()
    s_op = g.item_op.tolist()
    pinned = g.pinned.tolist()
    out_bytes = g.op_out_bytes.tolist()
    stage_kept = [s for s in range(g.n_items) if (k, s) in s_cols]
    # Frees: after its last reader (or its maker) in this stage, a storage not kept into k+1 goes.
    frees_after: dict[int, list[tuple[int, int]]] = {o: [] for o in positions}
    dups: dict[int, list[tuple[int, int]]] = {o: [] for o in positions}
    touched: dict[int, list[int]] = {}
    start_frees: list[tuple[int, int]] = []  # (column, bytes): storages freed as the stage starts
    for o in positions:
        for s in set(g.op_ins[o]) | set(g.op_outs[o]):
            touched.setdefault(s, []).append(o)
    for s, js in touched.items():
        if not size[s]:
            continue  # a view: it goes with its storage, and frees no bytes
        keep_next = s_cols.get((k + 1, s)) if k < T else None
        if k == T and pinned[s]:
            continue
        p = s_op[s]
        dup = None
        rp = r_term(k, p)
        if rp is not None and rp != FIRST and (k, s) in s_cols:
            # recomputed while still kept: it counts twice while its maker runs, once after
            dup = b.col(CONTINUOUS)
            b.row([(dup, 1), (rp, -1)], -INF, 0)
            b.row([(dup, 1), (s_cols[k, s], -1)], -INF, 0)
            dups[p].append((dup, size[s]))
        free_cols = []
        if (k, s) in s_cols and not any(r_term(k, x) == FIRST for x in js):
            # freed at the stage's start: kept into it, but nothing that runs in it touches it and it is
            # not kept into the next (as for a storage no operator of the stage can touch, below)
            start_free = b.col(CONTINUOUS)
            start_frees.append((start_free, size[s]))
            b.row([(start_free, 1), (s_cols[k, s], -1)], -INF, 0)
            for x in js:
                b.row([(start_free, 1), (r_term(k, x), 1)], -INF, 1)
            if keep_next is not None:
                b.row([(start_free, 1), (keep_next, 1)], -INF, 1)
            free_cols.append(start_free)
        for i, j in enumerate(js):
            later = js[i + 1:]
            if any(r_term(k, x) == FIRST for x in later):
                continue
            f = b.col(CONTINUOUS)
            free_cols.append(f)
            rj = r_term(k, j)
            if rj != FIRST:
                b.row([(f, 1), (rj, -1)], -INF, 0)
            for x in later:
                b.row([(f, 1), (r_term(k, x), 1)], -INF, 1)
            if keep_next is not None:
                b.row([(f, 1), (keep_next, 1)], -INF, 1)
            frees_after[j].append((f, size[s]))
        # a storage is freed at most as often as it is resident
        terms = [(f, 1) for f in free_cols] + ([(dup, 1)] if dup is not None else [])
        rhs = 0
        if (k, s) in s_cols:
            terms.append((s_cols[k, s], -1))
        if rp == FIRST:
            rhs = 1
        elif rp is not None:
            terms.append((rp, -1))
        if free_cols:
            b.row(terms, -INF, rhs)
    # Memory: a running level through the stage, within the budget at every computation. It starts with
    # what is kept into the stage, less what the stage does not touch and does not keep into the next (freed
    # at once): for a storage no operator of the stage can touch, S[k+1] <= S[k], so it counts S[k+1]
    # (pinned at the end: S[k]); for one that only operators not run in the stage touch, its start free.
    ub = max(cap, 0)
    level = b.col(CONTINUOUS, ub=ub, is_bytes=True)
    start = []
    for s in stage_kept:
        if not size[s]:
            continue
        if s in touched or (k == T and pinned[s]):
            start.append((s_cols[k, s], -size[s]))
        elif (k + 1, s) in s_cols:
            start.append((s_cols[k + 1, s], -size[s]))
    b.row([(level, 1)] + start + start_frees, 0, 0, is_bytes=True)
    prev = None
    for o in positions:
        nxt = b.col(CONTINUOUS, ub=ub, is_bytes=True)
        terms = [(nxt, 1), (level, -1)]
        rhs = 0
        r = r_term(k, o)
        if r == FIRST:
            rhs = out_bytes[o]
        elif out_bytes[o]:
            terms.append((r, -out_bytes[o]))
        if prev is not None:
            terms += [(f, sz) for f, sz in frees_after[prev] + dups[prev] if sz]
        b.row(terms, rhs, rhs, is_bytes=True)
        level, prev = nxt, o

