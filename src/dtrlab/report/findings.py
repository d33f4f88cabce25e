"""From stored runs to findings: one curve per (trace, policy), its switches, inversions and regimes.

Owns Curve (the runs of one trace and policy, in budget order), picking the switches worth a look,
and Found: what the report's first screen says of each trace, with the words it says it in.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..analysis.feasibility import Inversion, inversions
from ..analysis.regimes import Regime, Switch, regimes, switches
from ..analysis.runs import Run
from ..analysis.runs import runs_of as store_runs
from ..formats import overhead_text
from .plan import fine_neighbours

# The first screen lists this many switches (the largest) and inversions (the first) of a trace.
MAX_LISTED = 5


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
        """Switches between neighbouring fine budgets (at most plan.FINE_STEP apart)."""
        return [s for s in self.switches if s.lo.ratio is not None and s.hi.ratio is not None
                and fine_neighbours(s.lo.ratio, s.hi.ratio)]


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


# How the study's pairs are chosen, in the words the report says it in. The study states its LSTM
# figures as "budgets 0.10% of peak apart select fast and slow regimes whose overheads differ by up to
# 7.3x": one fast budget compared with slow budgets 0.1 % away ("up to": more than one such pair), so
# the rule looks for a fast run with a slow fine neighbour on each side, the first one up the budget
# axis of the study's window (the plan's, which says where the study's claims are). It reads only
# which neighbours are slow (the switch factor), never a figure the claims quote.
PAIR_RULE = ("the lowest-budget run of the subject policy's fine grid (0.001 steps) in the study's LSTM window "
             "whose neighbours on that grid, 0.001 below and 0.001 above, are both slow (each a switch with it as "
             "the fast run), with both of them; when no run there has two slow neighbours, the lowest-budget fast "
             "run of a switch between neighbouring fine budgets there, with its slow neighbour(s)")


@dataclass(frozen=True)
class StudyPair:
    """The study's pairs: one fast run and its slow neighbour(s) on the fine grid, chosen once by
    PAIR_RULE. Every figure of claims (a1), (a2) and (a3) is measured on these pairs (the report
    says which pair gives which), and the ablation (c) looks around them. `larger`: the switches
    between neighbouring fine budgets of the same curve with a larger factor than the pairs' largest
    (a finding beside the claims: the rule does not choose by size)."""

    trace: str
    switches: tuple[Switch, ...]  # each from the same fast run to one slow neighbour, largest factor first
    larger: tuple[Switch, ...] = ()  # larger fine switches of the same curve, largest first
    window: tuple[float, float] | None = None  # the ratios the rule looked in (lowest, highest)
    rule: str = PAIR_RULE

    @property
    def largest(self) -> Switch:
        return self.switches[0]

    @property
    def fast(self):
        """The fast run the pairs share."""
        return self.switches[0].fast

    @staticmethod
    def label(switch: Switch) -> str:
        """"fast/slow" ratios, e.g. 0.265/0.266."""
        return f"{switch.fast.ratio:g}/{switch.slow.ratio:g}"

    @property
    def labels(self) -> str:
        return " and ".join(self.label(s) for s in self.switches)

    @property
    def window_label(self) -> str:
        return f"{self.window[0]:g}-{self.window[1]:g}" if self.window else "the fine grid"

    def to_dict(self) -> dict:
        return {"trace": self.trace, "rule": self.rule, "pairs": [s.to_dict() for s in self.switches],
                "larger": [s.to_dict() for s in self.larger], "window": self.window}


def _fine_span(curve: Curve) -> tuple[float, float] | None:
    """The lowest and highest ratio of the curve that has a neighbouring fine budget."""
    ratios = sorted(r.ratio for r in curve.runs if r.ratio is not None)
    fine = [x for a, b in zip(ratios, ratios[1:]) if fine_neighbours(a, b) for x in (a, b)]
    return (min(fine), max(fine)) if fine else None


def study_pair(found: dict[tuple[str, str], Curve], trace: str, policy: str,
               window: tuple[float, float] | None = None) -> StudyPair | None:
    """The study's pairs on `trace` (the study's LSTM, found by content) by PAIR_RULE, among the fine
    switches inside `window` (lowest, highest ratio; None: the whole fine grid), or None without one."""
    curve = found.get((trace, policy))
    if curve is None:
        return None
    window = window or _fine_span(curve)
    inside = (lambda r: window[0] <= r.ratio <= window[1]) if window else (lambda r: True)
    fine = [s for s in curve.fine_switches() if inside(s.lo) and inside(s.hi)]
    by_fast: dict[int, list[Switch]] = {}
    for s in fine:
        by_fast.setdefault(s.fast.budget_bytes, []).append(s)
    if not by_fast:
        return None
    flanked = [b for b, sides in by_fast.items() if {s.upward for s in sides} == {True, False}]
    fast = min(flanked or by_fast)
    sides = tuple(sorted(by_fast[fast], key=lambda s: (-s.factor, s.slow.budget_bytes)))
    larger = tuple(sorted((s for s in fine if s.factor > sides[0].factor),
                          key=lambda s: (-s.factor, s.lo.budget_bytes)))
    return StudyPair(trace, sides, larger, window)


@dataclass(frozen=True)
class Found:
    """What one trace's curve of a policy shows: every switch (largest factor first) and every
    inversion (by budget); the first screen lists MAX_LISTED of each and counts the rest."""

    trace: str
    policy: str
    operators: int
    switches: tuple[Switch, ...]
    inversions: tuple[Inversion, ...]

    @property
    def listed_switches(self) -> tuple[Switch, ...]:
        return self.switches[:MAX_LISTED]

    @property
    def listed_inversions(self) -> tuple[Inversion, ...]:
        return self.inversions[:MAX_LISTED]


def found_on(found: dict[tuple[str, str], Curve], traces: tuple[dict, ...], policy: str) -> list[Found]:
    """One Found per trace (in the reproduction's order), from the policy's curves."""
    out = []
    for info in traces:
        curve = found.get((info["name"], policy))
        sw = sorted(curve.switches, key=lambda s: (-s.factor, s.lo.budget_bytes)) if curve else []
        out.append(Found(info["name"], policy, info["operators"], tuple(sw),
                         tuple(curve.inversions) if curve else ()))
    return out


def switch_text(s: Switch) -> str:
    """One switch in words: both budgets (smaller first), their overheads, the factor."""
    more = "; the larger budget is the slow one" if s.upward else ""
    return (f"{s.lo.label} -> {s.hi.label}: overhead {overhead_text(s.lo.overhead)} -> {overhead_text(s.hi.overhead)}, "
            f"{s.factor:.2f}x{more}")


def inversion_text(inv: Inversion) -> str:
    """One inversion in words: the last feasible budget, the infeasible ones, the next feasible."""
    bad = inv.infeasible
    where = ", ".join(r.label for r in bad) if len(bad) <= 6 else f"{bad[0].label}-{bad[-1].label} ({len(bad)} budgets)"
    outcomes = "/".join(sorted({r.outcome for r in bad}))
    return (f"feasible at {inv.last_feasible.label} (overhead {overhead_text(inv.last_feasible.overhead)}), {outcomes} at "
            f"{where}, feasible again at {inv.next_feasible.label} (overhead {overhead_text(inv.next_feasible.overhead)})")


def found_line(f: Found) -> str:
    """A trace's findings in one line (the console's and summary.md's first screen)."""
    parts = [f"{len(f.switches)} switch{'es' if len(f.switches) != 1 else ''}",
             f"{len(f.inversions)} inversion{'s' if len(f.inversions) != 1 else ''}"]
    if f.switches:
        parts[0] += f" (largest {switch_text(f.switches[0])})"
    if f.inversions:
        parts[1] += f" (first: {inversion_text(f.inversions[0])})"
    return f"{f.trace} ({f.operators:,} operators), {f.policy}: " + "; ".join(parts)
