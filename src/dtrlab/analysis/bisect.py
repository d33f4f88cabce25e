"""Bisection on integer byte budgets down to boundaries one byte apart.

Owns bisect_budgets: behaviour is not monotone in the budget, so every change met is kept and refined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..sim.policies import DEFAULT_POLICY
from ..sim.runtimes import DEFAULT_RUNTIME
from ..sim.simulate import simulate
from ..trace.lower import Program
from .runs import Run, run_of

OUTCOME, REGIME = "outcome", "regime"
DEFAULT_MAX_RUNS = 2000


@dataclass(frozen=True)
class Boundary:
    """Two budgets whose classes differ: adjacent when one byte apart."""

    lo: Run
    hi: Run
    lo_class: str
    hi_class: str

    @property
    def adjacent(self) -> bool:
        return self.hi.budget_bytes - self.lo.budget_bytes == 1

    def to_dict(self) -> dict:
        return {"lo": self.lo.to_dict(), "hi": self.hi.to_dict(), "lo_class": self.lo_class,
                "hi_class": self.hi_class, "adjacent": self.adjacent}


@dataclass(frozen=True)
class Bisection:
    """Every boundary met while bisecting, by budget; monotone: exactly one was met.

    Changes that begin and end between two evaluated budgets of the same class are not seen.
    """

    mode: str  # outcome: classes are outcomes; regime: feasible runs are fast or slow
    boundaries: tuple[Boundary, ...]
    runs: tuple[Run, ...]  # every budget evaluated, by budget
    complete: bool  # False when max_runs stopped the refinement first

    @property
    def monotone(self) -> bool:
        return len(self.boundaries) == 1

    def to_dict(self) -> dict:
        return {"mode": self.mode, "monotone": self.monotone, "complete": self.complete,
                "evaluated": len(self.runs), "boundaries": [b.to_dict() for b in self.boundaries]}


def bisect_budgets(program: Program, lo_bytes: int, hi_bytes: int, policy: str = DEFAULT_POLICY,
                   runtime: str = DEFAULT_RUNTIME, *, mode: str | None = None,
                   max_runs: int = DEFAULT_MAX_RUNS, lo_ratio: float | None = None,
                   hi_ratio: float | None = None, seed: int = 0, engine: str = "auto") -> Bisection:
    """Refine every interval whose ends differ in class until its ends are one byte apart.

    mode None: outcome when the two ends' outcomes differ, else regime (both must be feasible:
    a run is "slow" when its overhead is above the geometric mean of the ends' overheads).
    """
    if hi_bytes < lo_bytes:
        lo_bytes, hi_bytes, lo_ratio, hi_ratio = hi_bytes, lo_bytes, hi_ratio, lo_ratio
    seen: dict[int, Run] = {}

    def run(b: int, ratio: float | None = None) -> Run:
        if b not in seen:
            seen[b] = run_of(simulate(program, b, policy, runtime, seed=seed, engine=engine), ratio)
        return seen[b]

    a, z = run(lo_bytes, lo_ratio), run(hi_bytes, hi_ratio)
    if mode is None:
        mode = OUTCOME if a.outcome != z.outcome else REGIME
    if mode == REGIME:
        if not (a.feasible and z.feasible) or None in (a.overhead, z.overhead):
            raise ValueError("regime bisection needs two feasible budgets with an overhead")
        cut = math.sqrt(a.overhead * z.overhead)

        def klass(r: Run) -> str:
            return r.outcome if not r.feasible else ("slow" if r.overhead > cut else "fast")
    else:
        def klass(r: Run) -> str:
            return r.outcome

    work = [(lo_bytes, hi_bytes)] if klass(a) != klass(z) else []
    complete = True
    while work:
        lo, hi = work.pop()
        if hi - lo <= 1:
            continue
        if len(seen) >= max_runs:
            complete = False
            break
        mid = (lo + hi) // 2
        run(mid)  # memoised: the halves below read it
        # Keep both halves whose ends differ: a third class in the middle is a change too.
        for x, y in ((lo, mid), (mid, hi)):
            if klass(seen[x]) != klass(seen[y]):
                work.append((x, y))
    ordered = [seen[b] for b in sorted(seen)]
    bounds = tuple(Boundary(x, y, klass(x), klass(y)) for x, y in zip(ordered, ordered[1:]) if klass(x) != klass(y))
    return Bisection(mode, bounds, tuple(ordered), complete)
