"""The live session's clocks: what an operator costs, and so what staleness and compute mean.

Owns the two clocks of issue 14: `logical` (costs from a cost table: the trace captured of the
same step, matched operator by operator; deterministic) and `measured` (the real elapsed time of
each run, time.perf_counter_ns; not deterministic).
"""

from __future__ import annotations

from typing import Sequence

from ..capture.recorder import Capture
from ..defaults import LIVE_CLOCKS
from ..errors import UsageError
from ..trace.read import Call as TraceCall, Mutate
from .graph import OpCost

CLOCKS = LIVE_CLOCKS
LOGICAL, MEASURED = CLOCKS


def trace_costs(capture: Capture) -> list[tuple[str, OpCost]]:
    """(operator name, cost) for each operator the recorder wrote, in order. A call that writes in
    place is a MUTATE (carrying the time) followed, if it made results, by a CALL of time 0."""
    out: list[tuple[str, OpCost]] = []
    pending_mutate = False
    for ins in capture.instructions:
        if isinstance(ins, Mutate):
            out.append((ins.name, OpCost(ins.time_ns, 0)))
            pending_mutate = True
        elif isinstance(ins, TraceCall):
            # the results of the MUTATE just written: one live operator, its entry already stands
            if not (pending_mutate and out[-1][0] == ins.name and ins.time_ns == 0):
                out.append((ins.name, OpCost(0, ins.time_ns)))
            pending_mutate = False
        else:
            pending_mutate = False
    return out


class Clock:
    """Costs for a session. `first_run(name, elapsed_ns, recorded)`: the cost of an operator's first run
    (recorded: whether the trace recorder would write it: it made a result or wrote in place);
    `replay(call_cost, elapsed_ns)`: the cost of running it again."""

    kind = LOGICAL

    def first_run(self, name: str, mutated: bool, elapsed_ns: int, recorded: bool) -> OpCost:
        raise NotImplementedError

    def replay(self, cost: OpCost, elapsed_ns: int) -> int:
        return cost.total_ns


class UnitClock(Clock):
    """Every operator run costs 1 (a logical clock with a flat table; the session's default)."""

    def first_run(self, name, mutated, elapsed_ns, recorded) -> OpCost:
        return OpCost(1, 0) if mutated else OpCost(0, 1)


class TableClock(Clock):
    """Costs from a table of (operator name, cost), consumed in order by the operators the recorder
    writes; an operator it would not write (no result, no write) costs 0, as it is not in the trace."""

    def __init__(self, table: Sequence[tuple[str, OpCost]]) -> None:
        self._table = list(table)
        self.used = 0

    def first_run(self, name, mutated, elapsed_ns, recorded) -> OpCost:
        if not recorded:
            return OpCost(0, 0)
        if self.used >= len(self._table):
            raise UsageError(f"the cost table has {len(self._table)} operators; the step runs more "
                             f"(operator {self.used + 1}: {name})")
        want, cost = self._table[self.used]
        if want != name:
            raise UsageError(f"the cost table does not match the step: operator {self.used + 1} is {name} "
                             f"here and {want} in the table")
        self.used += 1
        return cost


class MeasuredClock(Clock):
    """Each run costs its own elapsed time (first runs and replays alike)."""

    kind = MEASURED

    def first_run(self, name, mutated, elapsed_ns, recorded) -> OpCost:
        return OpCost(elapsed_ns, 0) if mutated else OpCost(0, elapsed_ns)

    def replay(self, cost: OpCost, elapsed_ns: int) -> int:
        return elapsed_ns
