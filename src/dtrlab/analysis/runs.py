"""Run: the few facts about one simulation that the budget analyses read, in budget order.

Built from a RunResult (or a store row); analyses take any objects with these attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..sim.result import OK, OOM, REMAT_LIMIT, TIMEOUT, RunResult

# What counts as infeasible: the run could not finish under the budget (a remat_limit run hit
# the overhead cap, which a study uses as "too slow to count"). A timeout says nothing.
INFEASIBLE = (OOM, REMAT_LIMIT)


@dataclass(frozen=True)
class Run:
    """One run: budget (ratio may be None when given in bytes), outcome, overhead (as
    dtrlab.sim.result.run_overhead defines it: None for a run that did not finish), evictions."""

    ratio: float | None
    budget_bytes: int
    outcome: str
    overhead: float | None
    evictions: int = 0
    distinct_evicted: int = 0

    @property
    def feasible(self) -> bool:
        return self.outcome == OK

    @property
    def infeasible(self) -> bool:
        return self.outcome in INFEASIBLE

    @property
    def label(self) -> str:
        """The budget as a user would name it: the ratio when there is one, else bytes."""
        return f"{self.ratio:g}" if self.ratio is not None else f"{self.budget_bytes} B"

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "budget_bytes": self.budget_bytes, "outcome": self.outcome,
                "overhead": self.overhead,
                "evictions": self.evictions, "distinct_evicted": self.distinct_evicted}


def run_of(result: RunResult, ratio: float | None = None) -> Run:
    return Run(ratio, int(result.budget_bytes), result.outcome, result.overhead, result.evictions,
               result.distinct_evicted)


def by_budget(runs: Iterable) -> list:
    """Runs sorted by budget (ties keep their order): every analysis walks budgets upwards."""
    return sorted(runs, key=lambda r: r.budget_bytes)


def runs_of(frame, timeouts: bool = False) -> list:
    """Runs from results-store rows (a pandas frame, whose overheads Store.rows gave by the one
    rule), by budget. A timed-out run stores no measurements; it is left out unless `timeouts`
    (then with no overhead and no evictions)."""
    import pandas as pd

    def value(x, missing):
        return missing if x is None or pd.isna(x) else x

    out = []
    for row in frame.itertuples(index=False):
        if row.outcome == TIMEOUT and not timeouts:
            continue
        overhead = value(row.overhead, None)
        out.append(Run(value(row.ratio, None), int(row.budget_bytes), row.outcome,
                       None if overhead is None else float(overhead), int(value(row.evictions, 0)),
                       int(value(row.distinct_evicted, 0))))
    return by_budget(out)
