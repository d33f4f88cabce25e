"""Regime switches: neighbouring feasible budgets whose overheads differ by more than a factor.

Owns Switch and Regime (stretches of budgets between switches, labelled fast or slow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..defaults import DEFAULT_SWITCH_FACTOR as DEFAULT_FACTOR  # one definition, in defaults
from .runs import by_budget


@dataclass(frozen=True)
class Switch:
    """Two feasible budgets next to each other (only infeasible or no runs between them) whose
    overheads differ by more than the factor. `lo` has the smaller budget."""

    lo: object  # a Run (or anything with its attributes)
    hi: object
    factor: float  # slow overhead / fast overhead, >= 1
    across_gap: bool  # infeasible budgets lie between the two

    @property
    def fast(self):
        return self.lo if self.lo.overhead <= self.hi.overhead else self.hi

    @property
    def slow(self):
        return self.hi if self.fast is self.lo else self.lo

    @property
    def upward(self) -> bool:
        """True when the larger budget is the slow one (more memory, more recompute)."""
        return self.slow is self.hi

    def to_dict(self) -> dict:
        return {"ratio_fast": self.fast.ratio, "ratio_slow": self.slow.ratio,
                "budget_fast_bytes": self.fast.budget_bytes, "budget_slow_bytes": self.slow.budget_bytes,
                "overhead_fast": self.fast.overhead, "overhead_slow": self.slow.overhead,
                "factor": self.factor, "upward": self.upward, "across_gap": self.across_gap}


@dataclass(frozen=True)
class Regime:
    """A stretch of feasible budgets with no switch inside. label: "fast" or "slow" when it is on
    one side of every switch that bounds it, "mixed" when on both, "only" when no switch bounds it."""

    runs: tuple
    label: str

    @property
    def first(self):
        return self.runs[0]

    @property
    def last(self):
        return self.runs[-1]

    @property
    def overhead_min(self) -> float | None:
        return min((r.overhead for r in self.runs if r.overhead is not None), default=None)

    @property
    def overhead_max(self) -> float | None:
        return max((r.overhead for r in self.runs if r.overhead is not None), default=None)

    def to_dict(self) -> dict:
        return {"label": self.label, "first_ratio": self.first.ratio, "last_ratio": self.last.ratio,
                "first_budget_bytes": self.first.budget_bytes, "last_budget_bytes": self.last.budget_bytes,
                "runs": len(self.runs), "overhead_min": self.overhead_min, "overhead_max": self.overhead_max}


def _check_factor(factor: float) -> None:
    if not factor > 1:
        raise ValueError(f"a switch factor must exceed 1, got {factor}")


def switches(runs: Sequence, factor: float = DEFAULT_FACTOR) -> list[Switch]:
    """Every pair of consecutive feasible budgets whose overheads differ by more than `factor`."""
    _check_factor(factor)
    out = []
    prev, gap = None, False
    for run in by_budget(runs):
        if not run.feasible:
            gap = gap or run.infeasible
            continue
        if run.overhead is None:  # a step with no compute: no figure to compare
            continue
        if prev is not None:
            a, b = prev.overhead, run.overhead
            f = max(a, b) / min(a, b)
            if f > factor:
                out.append(Switch(prev, run, f, gap))
        prev, gap = run, False
    return out


def regimes(runs: Sequence, factor: float = DEFAULT_FACTOR) -> list[Regime]:
    """The feasible budgets cut at each switch, each stretch labelled by the switches around it."""
    found = switches(runs, factor)
    cut_after = {id(s.lo): s for s in found}
    stretches: list[list] = [[]]
    for run in by_budget(runs):
        if not run.feasible:
            continue
        stretches[-1].append(run)
        if id(run) in cut_after:
            stretches.append([])
    out = []
    for k, stretch in enumerate(s for s in stretches if s):
        sides = set()
        if k > 0:  # the switch below this stretch
            sw = found[k - 1]
            sides.add("fast" if sw.fast is sw.hi else "slow")
        if k < len(found):  # the switch above
            sw = found[k]
            sides.add("fast" if sw.fast is sw.lo else "slow")
        label = "only" if not sides else (sides.pop() if len(sides) == 1 else "mixed")
        out.append(Regime(tuple(stretch), label))
    return out
