"""Feasibility inversions (a larger budget fails where a smaller one ran) and overhead inversions
(a larger budget pays more recompute than a smaller feasible one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .runs import by_budget


@dataclass(frozen=True)
class Inversion:
    """Infeasible budgets between two feasible ones: last_feasible < infeasible... < next_feasible."""

    last_feasible: object  # a Run
    infeasible: tuple
    next_feasible: object

    def to_dict(self) -> dict:
        return {"last_feasible_ratio": self.last_feasible.ratio,
                "infeasible_ratios": [r.ratio for r in self.infeasible],
                "next_feasible_ratio": self.next_feasible.ratio,
                "last_feasible_budget_bytes": self.last_feasible.budget_bytes,
                "infeasible_budget_bytes": [r.budget_bytes for r in self.infeasible],
                "next_feasible_budget_bytes": self.next_feasible.budget_bytes,
                "outcomes": sorted({r.outcome for r in self.infeasible})}


@dataclass(frozen=True)
class OverheadInversion:
    """Consecutive feasible budgets that all pay more than a smaller feasible budget did.

    smaller: the cheapest feasible run below them; larger: the stretch; worst: its dearest run.
    """

    smaller: object
    larger: tuple
    worst: object

    @property
    def excess(self) -> float:
        """Overhead the worst larger budget pays beyond the smaller one (in baseline computes)."""
        return self.worst.overhead - self.smaller.overhead

    @property
    def factor(self) -> float:
        return self.worst.overhead / self.smaller.overhead

    def to_dict(self) -> dict:
        return {"smaller_ratio": self.smaller.ratio, "smaller_budget_bytes": self.smaller.budget_bytes,
                "smaller_overhead": self.smaller.overhead,
                "larger_ratios": [r.ratio for r in self.larger],
                "worst_ratio": self.worst.ratio, "worst_budget_bytes": self.worst.budget_bytes,
                "worst_overhead": self.worst.overhead, "excess": self.excess, "factor": self.factor}


def inversions(runs: Sequence) -> list[Inversion]:
    """Every run of infeasible budgets with a feasible budget on both sides. Budgets that neither
    ran nor failed (timeouts) are skipped over."""
    out = []
    last, pending = None, []
    for run in by_budget(runs):
        if run.feasible:
            if last is not None and pending:
                out.append(Inversion(last, tuple(pending), run))
            last, pending = run, []
        elif run.infeasible and last is not None:
            pending.append(run)
    return out


def overhead_inversions(runs: Sequence, min_factor: float = 1.0) -> list[OverheadInversion]:
    """Feasible budgets paying more than min_factor x the cheapest smaller feasible budget,
    grouped into stretches that share that cheapest run (min_factor 1.0: any excess at all)."""
    out = []
    best = None
    stretch: list = []

    def close() -> None:
        if stretch:
            out.append(OverheadInversion(best, tuple(stretch), max(stretch, key=lambda r: r.overhead)))

    for run in by_budget(runs):
        if not run.feasible or run.overhead is None:  # None: a step with no compute
            continue
        if best is not None and run.overhead > best.overhead * min_factor:
            stretch.append(run)
            continue
        close()
        stretch = []
        if best is None or run.overhead < best.overhead:
            best = run
    close()
    return out
