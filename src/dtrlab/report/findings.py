"""From stored runs to findings: one curve per (trace, policy), its switches, inversions and regimes.

Owns Curve (the runs of one trace and policy, in budget order) and picking the switches worth a look.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..analysis.feasibility import Inversion, inversions
from ..analysis.regimes import Regime, Switch, regimes, switches
from ..analysis.runs import Run
from ..analysis.runs import runs_of as store_runs

# Two ratios this close are neighbours on the fine grid (0.001 steps; floats of decimal literals).
FINE_NEIGHBOURS = 0.001 + 1e-9


@dataclass(frozen=True)
class Curve:
    """Every stored run of one trace and policy (any budgets the plan asked for), by budget."""

    trace: str
    policy: str
    runs: tuple[Run, ...]
    factor: float

    @property
    def switches(self) -> list[Switch]:
        return switches(self.runs, self.factor)

    @property
    def regimes(self) -> list[Regime]:
        return regimes(self.runs, self.factor)

    @property
    def inversions(self) -> list[Inversion]:
        return inversions(self.runs)

    def fine_switches(self) -> list[Switch]:
        """Switches between budgets at most 0.1 % of the peak apart (a fine-grid step)."""
        return [s for s in self.switches if s.lo.ratio is not None and s.hi.ratio is not None
                and s.hi.ratio - s.lo.ratio <= FINE_NEIGHBOURS]

    def restricted(self, ratios) -> "Curve":
        wanted = {float(r) for r in ratios}
        return Curve(self.trace, self.policy, tuple(r for r in self.runs if r.ratio in wanted), self.factor)


def runs_of(frame: pd.DataFrame) -> tuple[Run, ...]:
    """Runs from store rows (timeouts left out: they say nothing about the budget)."""
    return tuple(store_runs(frame))


def curves(frame: pd.DataFrame, factor: float) -> dict[tuple[str, str], Curve]:
    """One Curve per (trace, policy) in the frame (one runtime and one seed are assumed)."""
    return {(trace, policy): Curve(trace, policy, runs_of(g), factor)
            for (trace, policy), g in frame.groupby(["trace", "policy"], sort=True)}


def largest_switch(found: dict[tuple[str, str], Curve], policy: str, trace: str | None = None,
                   fine: bool = True, fine_only: bool = False) -> tuple[str, Switch] | None:
    """The switch with the largest factor among the policy's curves: between neighbouring fine
    budgets when there is one (`fine`), else any (unless `fine_only`)."""
    best = None
    for (t, p), curve in found.items():
        if p != policy or (trace is not None and t != trace):
            continue
        for s in (curve.fine_switches() if fine else curve.switches):
            if best is None or s.factor > best[1].factor:
                best = (t, s)
    if best is None and fine and not fine_only:
        return largest_switch(found, policy, trace, fine=False)
    return best
