"""The checker: a schedule replayed against its trace's Program under a budget, event by event.

Owns the memory model every maker of schedules is held to (docs/schedules.md). It is written apart
from the engines, on purpose: it is the oracle their emitted schedules are checked against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import DtrlabError
from ..sim.result import OK, run_overhead
from ..formats import bytes_text
from ..sim.simulate import check_budget_bytes
from ..trace.lower import PIN, Program
from .format import COMPUTE, FREE, Schedule

HEADER = -1  # the event index of a mistake in the schedule's header (the trace it is for)


class ScheduleError(DtrlabError):
    """A schedule its trace rejects: event_index is the event at fault (0-based), HEADER for the
    header, or len(schedule) for what is missing at the end (then `at_end`)."""

    def __init__(self, event_index: int, reason: str, at_end: bool = False) -> None:
        where = ("header" if event_index == HEADER else f"end (after {event_index} events)" if at_end
                 else f"event {event_index}")
        super().__init__(f"{where}: {reason}")
        self.event_index = event_index
        self.reason = reason
        self.at_end = at_end


@dataclass(frozen=True)
class Replay:
    """What a valid schedule costs: the peak of resident bytes (an operator's outputs counted while
    it runs), the final clock (from 1, as the simulator's), overhead = clock_ns / compute_ns
    (run_overhead's rule: None for a schedule checked as a prefix, complete=False, as an
    unfinished run has none)."""

    peak_bytes: int
    clock_ns: int
    overhead: float | None
    n_compute: int  # first computations
    n_recompute: int  # computations of an operator already computed once
    n_free: int
    remat_ns: int  # the recomputations' time
    compute_ns: int  # the program's own compute: every operator once

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def check_schedule(program: Program, schedule: Schedule, budget_bytes: int | None, *,
                   complete: bool = True) -> Replay:
    """Replay `schedule` on `program` under `budget_bytes` (None: unbounded) and return its cost;
    raise ScheduleError at the first event the memory model forbids.

    complete=False checks a prefix: the events as far as they go, without the end's demands
    (every operator computed, every output resident), as an out-of-memory run's schedule is."""
    if schedule.trace_sha256 != program.sha256:
        raise ScheduleError(HEADER, f"the schedule is for another trace (sha256 {schedule.trace_sha256[:12]}..., "
                                    f"{program.name} has {program.sha256[:12]}...)")
    if budget_bytes is not None:
        check_budget_bytes(budget_bytes, "the budget")
    n_ops, n_storages = program.n_ops, program.n_storages
    cost = program.op_cost_ns.tolist()
    ptr, op_args = program.op_arg_ptr.tolist(), program.op_args.tolist()
    out_start, n_out = program.op_out_start.tolist(), program.op_n_out.tolist()
    constant_op = program.op_constant.tolist()
    t_storage, t_alias = program.tensor_storage.tolist(), program.tensor_alias_arg.tolist()
    t_size = program.tensor_size_bytes.tolist()
    s_size = program.storage_size_bytes.tolist()
    s_constant = program.storage_constant.tolist()
    s_tensors: list[list[int]] = [[] for _ in range(n_storages)]
    for t, s in enumerate(t_storage):
        s_tensors[s].append(t)
    # While an operator runs all its outputs are made, an output whose storage is resident too
    # (the new copy is then dropped): it needs room for every output's bytes (aliases take none).
    need_of = [sum(t_size[out_start[o]:out_start[o] + n_out[o]]) for o in range(n_ops)]

    def op_text(o: int) -> str:
        return f"operator {o} ({program.op_names[o]}, trace line {int(program.op_line[o])})"

    resident = bytearray(n_storages)
    defined = bytearray(program.n_tensors)  # a tensor's value exists: made since its storage came back
    freed_at = [-1] * n_storages
    memory = peak = remat_ns = 0
    clock = 1
    next_op = n_recompute = n_free = 0
    budget = math.inf if budget_bytes is None else budget_bytes
    for i, (kind, x) in enumerate(zip(schedule.kind.tolist(), schedule.target.tolist())):
        if kind == COMPUTE:
            if x >= n_ops:
                raise ScheduleError(i, f"compute of operator {x}, but the trace has {n_ops} operators")
            if x > next_op:
                raise ScheduleError(i, f"{op_text(x)} runs before its first computation is due: "
                                       f"{op_text(next_op)} is computed first (first computations follow the trace)")
            remat = x < next_op
            if remat and constant_op[x]:
                raise ScheduleError(i, f"{op_text(x)} is a constant: it is made once and stays resident")
            for a in op_args[ptr[x]:ptr[x + 1]]:
                if not defined[a]:
                    s = t_storage[a]
                    why = (f"its storage {s} is resident but this view of it was not made again since the storage "
                           f"came back" if resident[s] else
                           f"its storage {s} was freed at event {freed_at[s]}" if freed_at[s] >= 0 else
                           f"its storage {s} is not resident")
                    raise ScheduleError(i, f"{op_text(x)} needs input tensor {program.tensor_names[a]!r}, "
                                           f"which is not resident: {why}")
            need = need_of[x]
            if memory + need > budget:
                raise ScheduleError(i, f"{op_text(x)} crosses the budget: resident {bytes_text(memory, scaled=False)} + its outputs "
                                       f"{bytes_text(need, scaled=False)} = {bytes_text(memory + need, scaled=False)} > {bytes_text(budget_bytes, scaled=False)}")
            if memory + need > peak:
                peak = memory + need
            for u in range(out_start[x], out_start[x] + n_out[x]):
                s = t_storage[u]
                if t_alias[u] < 0 and not resident[s]:
                    resident[s] = 1
                    memory += s_size[s]
                defined[u] = 1
            clock += cost[x]
            if remat:
                n_recompute += 1
                remat_ns += cost[x]
            else:
                next_op += 1
        elif kind == FREE:
            if x >= n_storages:
                raise ScheduleError(i, f"free of storage {x}, but the trace has {n_storages} storages")
            if not resident[x]:
                raise ScheduleError(i, f"free of storage {x}, which is not resident"
                                       + (f" (freed at event {freed_at[x]})" if freed_at[x] >= 0 else ""))
            if s_constant[x]:
                raise ScheduleError(i, f"free of storage {x}, a constant's: constants stay resident")
            resident[x] = 0
            memory -= s_size[x]
            freed_at[x] = i
            for t in s_tensors[x]:
                defined[t] = 0
            n_free += 1
        else:  # pragma: no cover - Schedule admits only the two kinds
            raise AssertionError(kind)
    n = len(schedule)
    if complete:
        if next_op < n_ops:
            raise ScheduleError(n, f"the schedule ends before the first computation of {op_text(next_op)} "
                                   f"({next_op} of {n_ops} operators computed)", at_end=True)
        for kind, t in zip(program.step_kind.tolist(), program.step_target.tolist()):
            if kind == PIN and not defined[t] and not constant_op[program.tensor_op[t]]:
                raise ScheduleError(n, f"output tensor {program.tensor_names[t]!r} (storage {t_storage[t]}, made by "
                                       f"{op_text(int(program.tensor_op[t]))}) is not resident at the end", at_end=True)
    compute_ns = program.compute_ns
    return Replay(peak_bytes=peak, clock_ns=clock, overhead=run_overhead(OK, clock, compute_ns) if complete else None,
                  n_compute=next_op, n_recompute=n_recompute, n_free=n_free, remat_ns=remat_ns,
                  compute_ns=compute_ns)
