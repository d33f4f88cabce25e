"""The two back ends of a Milp: HiGHS (MILP, and the LP relaxation alone) and OR-Tools CP-SAT.

Each returns a SolverRun: the status, the solution (or None), the objective, the proven bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import UsageError
from .model import Milp

# HiGHS's feasibility tolerances (1e-6 on a MIP by default) would let a row of bytes overrun by that
# much of a unit: memory is counted in the largest unit dividing every byte figure, tolerances 1e-9.
TOLERANCE = 1e-9

OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN = "optimal", "feasible", "infeasible", "unknown"
CUTOFF = "cutoff"  # a solve given a start's objective as cutoff found nothing below it


@dataclass(frozen=True)
class SolverRun:
    solver: str
    status: str  # OPTIMAL, FEASIBLE (a solution, not proven best), INFEASIBLE, UNKNOWN (none found)
    x: np.ndarray | None
    objective: float | None  # recompute ns of the solution found
    bound: float  # proven lower bound on the recompute ns (0 when nothing was proven)
    time_s: float
    relaxed: bool = False


def byte_unit(m: Milp) -> int:
    """The greatest common divisor of the model's byte figures: memory in these units stays exact."""
    row_of = np.repeat(np.arange(m.n_rows), np.diff(m.row_ptr))
    scaled = m.row_bytes[row_of] & ~m.col_bytes[m.row_idx]
    bounds = np.concatenate([m.row_lb[m.row_bytes], m.row_ub[m.row_bytes]])
    bounds = bounds[np.isfinite(bounds)].astype(np.int64)
    figures = np.abs(np.concatenate([m.row_val[scaled], m.col_ub[m.col_bytes], bounds]))
    figures = figures[figures != 0]
    return int(np.gcd.reduce(figures)) if len(figures) else 1


def _scaled_rows(m: Milp, unit: float):
    val = m.row_val.astype(float)
    row_of = np.repeat(np.arange(m.n_rows), np.diff(m.row_ptr))
    scale = m.row_bytes[row_of] & ~m.col_bytes[m.row_idx]
    val[scale] /= unit
    lb, ub = m.row_lb.copy(), m.row_ub.copy()
    lb[m.row_bytes] /= unit
    ub[m.row_bytes] /= unit
    return val, lb, ub


def solve_highs(m: Milp, time_limit_s: float, threads: int = 1, abs_gap_ns: float = 0.0,
                relax: bool = False, progress: Callable[[str], None] | None = None,
                start: np.ndarray | None = None) -> SolverRun:
    """Solve with HiGHS; `relax`: the LP relaxation only (its optimum bounds the MILP's); `start`: values
    of the leading columns to begin from."""
    import highspy

    t0 = time.perf_counter()
    h = _quiet_highs(highspy)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", threads)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_abs_gap", float(abs_gap_ns))
    h.setOptionValue("mip_rel_gap", 0.0)
    for option in ("primal_feasibility_tolerance", "mip_feasibility_tolerance"):
        h.setOptionValue(option, TOLERANCE)
    unit = byte_unit(m)
    lp = highspy.HighsLp()
    n = m.n_cols
    lp.num_col_ = n
    lp.num_row_ = m.n_rows
    lp.col_cost_ = m.col_cost.astype(float)
    col_ub = m.col_ub.astype(float)
    col_ub[m.col_bytes] /= unit
    lp.col_lower_ = m.col_lb.astype(float)
    lp.col_upper_ = col_ub
    val, lb, ub = _scaled_rows(m, unit)
    lp.row_lower_ = np.where(np.isinf(lb), -highspy.kHighsInf, lb)
    lp.row_upper_ = np.where(np.isinf(ub), highspy.kHighsInf, ub)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = m.row_ptr.astype(np.int32)
    lp.a_matrix_.index_ = m.row_idx
    lp.a_matrix_.value_ = val
    if not relax:
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                           for i in m.col_int.tolist()]
    h.passModel(lp)
    cutoff = None
    if start is not None and not relax:
        # Not handed over as a solution: HiGHS 1.16 can return a given start from getSolution after it
        # found better (its reported objective then disagrees with the solution). A cutoff at the
        # start's objective prunes as well; the caller keeps the start's own schedule.
        cutoff = float(m.col_cost[:len(start)] @ start) + 0.5
        h.setOptionValue("objective_bound", cutoff)
    if progress is not None and not relax:
        _watch_highs(h, progress)
    h.run()
    elapsed = time.perf_counter() - t0
    model_status = h.getModelStatus()
    info = h.getInfo()
    ms = highspy.HighsModelStatus
    if model_status == ms.kInfeasible and cutoff is not None:
        # nothing beats the start's objective: that is the bound (the start itself is the caller's)
        return SolverRun("highs", CUTOFF, None, None, cutoff - 0.5, elapsed)
    if model_status == ms.kInfeasible:
        return SolverRun("highs", INFEASIBLE, None, None, math.inf, elapsed, relax)
    if relax:
        if model_status != ms.kOptimal:
            return SolverRun("highs", UNKNOWN, None, None, 0.0, elapsed, True)
        obj = float(info.objective_function_value)
        return SolverRun("highs", OPTIMAL, np.array(h.getSolution().col_value), obj, obj, elapsed, True)
    bound = float(info.mip_dual_bound) if math.isfinite(info.mip_dual_bound) else 0.0
    if info.primal_solution_status == 2:  # a feasible solution exists
        x = np.array(h.getSolution().col_value)
        obj = float(info.objective_function_value)
        if abs(float(m.col_cost @ x) - obj) > 0.5 + 1e-9 * abs(obj):
            raise AssertionError(f"HiGHS's solution costs {m.col_cost @ x} but it reports {obj}")
        status = OPTIMAL if model_status == ms.kOptimal else FEASIBLE
        if status == OPTIMAL:
            bound = max(bound, obj - abs_gap_ns)
        return SolverRun("highs", status, x, obj, max(bound, 0.0), elapsed)
    return SolverRun("highs", UNKNOWN, None, None, max(bound, 0.0), elapsed)


def _quiet_highs(highspy):
    """A Highs instance, its copyright banner (written to stdout on the first one made) kept off stdout,
    where a command's JSON goes."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return h


def _watch_highs(h, progress: Callable[[str], None]) -> None:
    """Report the best solution and the bound every few seconds as HiGHS's MIP search runs."""
    last = [0.0]
    t0 = time.perf_counter()

    def on_event(event) -> None:
        now = time.perf_counter()
        if now - last[0] < 5.0:
            return
        last[0] = now
        d = event.data_out
        if math.isfinite(d.objective_function_value) and math.isfinite(d.mip_dual_bound):
            progress(f"recompute: best {d.objective_function_value:,.0f} ns, bound {d.mip_dual_bound:,.0f} ns "
                     f"({d.mip_node_count} nodes, {now - t0:.0f} s)")

    try:
        h.cbMipInterrupt.subscribe(on_event)
    except AttributeError:  # an older highspy without callbacks: no progress lines, same solve
        return


def solve_cpsat(m: Milp, time_limit_s: float, threads: int = 1, abs_gap_ns: float = 0.0) -> SolverRun:
    """Solve with OR-Tools CP-SAT: memory in units of the greatest common divisor of its byte figures."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise UsageError("solver cpsat needs OR-Tools: pip install ortools (highs, the default, needs nothing more)") from None

    t0 = time.perf_counter()
    unit = byte_unit(m)
    model = cp_model.CpModel()
    ub = m.col_ub.copy()
    ub[m.col_bytes] //= unit
    xs = [model.NewIntVar(0, int(u), "") for u in ub.tolist()]
    ptr, idx, val = m.row_ptr.tolist(), m.row_idx.tolist(), m.row_val.tolist()
    for r in range(m.n_rows):
        lo, hi = m.row_lb[r], m.row_ub[r]
        terms = []
        for i in range(ptr[r], ptr[r + 1]):
            c, v = idx[i], val[i]
            if m.row_bytes[r] and not m.col_bytes[c]:
                v //= unit
            terms.append(xs[c] * v)
        expr = sum(terms)
        if m.row_bytes[r]:
            lo, hi = lo / unit, hi / unit  # exact: byte rows' right-hand sides are sizes too
        if math.isfinite(lo) and math.isfinite(hi):
            model.Add(expr >= int(lo)) if lo != hi else model.Add(expr == int(lo))
            if lo != hi:
                model.Add(expr <= int(hi))
        elif math.isfinite(lo):
            model.Add(expr >= math.ceil(lo))
        elif math.isfinite(hi):
            model.Add(expr <= math.floor(hi))
    model.Minimize(sum(xs[c] * int(v) for c, v in enumerate(m.col_cost.tolist()) if v))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = threads
    solver.parameters.absolute_gap_limit = float(abs_gap_ns)
    status = solver.Solve(model)
    elapsed = time.perf_counter() - t0
    if status == cp_model.INFEASIBLE:
        return SolverRun("cpsat", INFEASIBLE, None, None, math.inf, elapsed)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        x = np.array([solver.Value(v) for v in xs], float)
        return SolverRun("cpsat", OPTIMAL if status == cp_model.OPTIMAL else FEASIBLE, x,
                         float(solver.ObjectiveValue()), float(solver.BestObjectiveBound()), elapsed)
    return SolverRun("cpsat", UNKNOWN, None, None, max(float(solver.BestObjectiveBound()), 0.0), elapsed)
