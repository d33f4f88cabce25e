"""The least budget of a trace, three ways: the budget below which no schedule can fit (a proof,
solve.min_budget_bytes), the least budget at which a schedule was found (the portfolio's, by bisection:
an upper bound on the true least), and the least at which DTR's own run ends ok (by bisection).

Feasibility is not monotone in the budget for a policy (ResNet-32's DTR runs at 0.101 of its peak and
runs out of memory at 0.102-0.106), so each bisection gives one boundary, not necessarily the least
budget at which the policy ends ok; the budget it reports always has a run that ended ok there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..trace.lower import Program
from ..defaults import DEFAULT_RUNTIME
from .defaults import LEAST_BUDGET_STEP


@dataclass(frozen=True)
class LeastBudget:
    """Budgets in bytes. The true least budget of any schedule lies in [no_schedule_below_bytes,
    schedule_found_bytes]; found_* describe the schedule found there (replayed by the checker)."""

    trace: str
    peak_bytes: int
    no_schedule_below_bytes: int
    schedule_found_bytes: int | None  # None: no schedule found at any budget up to the peak
    found_overhead: float | None
    found_maker: str | None
    dtr_bytes: int | None  # DTR's boundary (None: DTR does not end ok even at the peak)
    time_s: float

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        for name in ("no_schedule_below_bytes", "schedule_found_bytes", "dtr_bytes"):
            v = d[name]
            d[name.replace("_bytes", "_ratio")] = None if v is None else v / self.peak_bytes
        return d


def _bisect(ok, low: int, high: int, step: int) -> int:
    """The least budget in (low, high] that bisection finds `ok`, given ok(high) and not ok(low)."""
    while high - low > step:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    return high


def _peak_and_ceiling(program: Program, floor_bytes: int) -> tuple[int, int]:
    """The budget to search down from (the simulator's unconstrained peak, at least the floor), and the
    one above it where every run fits: every storage resident at once, for a peak that sits below what
    a run needs."""
    from ..sim.simulate import baseline

    peak = max(baseline(program).peak_bytes, floor_bytes)
    return peak, max(peak, int(program.storage_size_bytes.sum()))


def dtr_least_bytes(program: Program, runtime: str = DEFAULT_RUNTIME, floor_bytes: int | None = None) -> int | None:
    """The least budget, to LEAST_BUDGET_STEP of the peak, at which bisection finds DTR's run (under
    `runtime`) ending ok, from `floor_bytes` (default: solve.min_budget_bytes, below which nothing
    fits) up; None if it does not end ok even with every storage resident at once."""
    from ..sim.simulate import simulate
    from .solve import min_budget_bytes

    floor = min_budget_bytes(program) if floor_bytes is None else floor_bytes
    peak, ceiling = _peak_and_ceiling(program, floor)

    def ok(budget: int) -> bool:
        return simulate(program, budget, "dtr", runtime).outcome == "ok"

    top = next((b for b in (peak, ceiling) if ok(b)), None)
    if top is None:
        return None
    return floor if ok(floor) else _bisect(ok, floor, top, max(1, int(peak * LEAST_BUDGET_STEP)))


def least_budget(program: Program, say=lambda _msg: None) -> LeastBudget:
    """The three least budgets of `program`, each bisection to LEAST_BUDGET_STEP of its peak."""
    from ..schedule.check import check_schedule
    from .solve import min_budget_bytes, portfolio_best

    t0 = time.perf_counter()
    proven = min_budget_bytes(program)
    peak, ceiling = _peak_and_ceiling(program, proven)
    step = max(1, int(peak * LEAST_BUDGET_STEP))
    dtr = dtr_least_bytes(program, floor_bytes=proven)
    say(f"DTR ends ok down to {dtr:,} bytes" if dtr is not None else "DTR does not end ok at the peak")

    found: dict[int, tuple] = {}

    def any_ok(budget: int) -> bool:
        best = portfolio_best(program, budget)[1]
        if best is not None:
            found[budget] = best
            say(f"a schedule at {budget:,} bytes ({budget / peak:.4f} of the peak): {best[2]}")
        return best is not None

    at = None
    if (dtr is not None and any_ok(dtr)) or any_ok(ceiling):
        at = proven if any_ok(proven) else _bisect(any_ok, proven, min(found), step)
    overhead = maker = None
    if at is not None:
        _, schedule, maker, _ = found[at]
        overhead = check_schedule(program, schedule, at).overhead
    return LeastBudget(program.name, peak, proven, at, overhead, maker, dtr, time.perf_counter() - t0)
