"""A policy's envelope: at each budget B, the least overhead its runs reach at any budget up to B.

A schedule that fits a budget fits every larger one, so the run at a smaller budget is a schedule for B
too: the envelope is what the policy's own schedules offer at B, however its run at B itself went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .runs import by_budget


@dataclass(frozen=True)
class EnvelopePoint:
    """The envelope at one run's budget: the least overhead at or below it (None: no run at or below
    it finished), and the budget of the run that reached it."""

    ratio: float | None
    budget_bytes: int
    overhead: float | None
    from_budget_bytes: int | None


def envelope(runs: Iterable) -> list[EnvelopePoint]:
    """The envelope at each run's budget, in budget order (runs: analysis.runs.Run or alike; those
    that did not finish have no overhead and lower nothing). Two runs at one budget give one point."""
    points: list[EnvelopePoint] = []
    best: tuple[float, int] | None = None
    for run in by_budget(runs):
        if run.feasible and run.overhead is not None and (best is None or run.overhead < best[0]):
            best = (run.overhead, run.budget_bytes)
        point = EnvelopePoint(run.ratio, run.budget_bytes, None if best is None else best[0],
                              None if best is None else best[1])
        if points and points[-1].budget_bytes == run.budget_bytes:
            points[-1] = point
        else:
            points.append(point)
    return points


def envelope_at(points: list[EnvelopePoint], budget_bytes: int) -> float | None:
    """The envelope at any budget, from envelope(runs): that of the largest run budget at or below it."""
    best = None
    for point in points:
        if point.budget_bytes > budget_bytes:
            break
        best = point.overhead
    return best
