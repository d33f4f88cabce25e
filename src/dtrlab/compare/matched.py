"""The comparison at matched memory: for each mode that is not staged, the fastest staged step whose
measured peak is no higher, and whether DTR wins or loses there.

Owns the rule and its rows (Matched). Only peaks counted alike are set side by side: a point counted
by live storages (peak_kind "storages": the eager modes and the staged steps) is matched; a compiled
point, counted by the allocator, is shown beside the others but never matched. Reads Points by their
fields alone (no torch here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

DTR_WINS, DTR_LOSES, NONE_FITS = "DTR wins", "DTR loses", "no staged step fits"
MATCHED_KIND = "storages"  # the counter whose peaks are matched (compare.modes.Runner.peak_kind)


@dataclass(frozen=True)
class Matched:
    """One mode's point against the fastest staged step at most as high: the staged step's label, peak
    and step time are None when none fits. DTR wins when that step is faster, and loses otherwise."""

    model: str
    label: str  # the mode's (compare.Mode.label: "checkpoint", "sac", "plain")
    peak_bytes: int
    step_s: float
    staged: str | None  # the staged step's label ("staged 0.7"), None: none fits
    staged_peak_bytes: int | None
    staged_step_s: float | None
    verdict: str  # DTR_WINS, DTR_LOSES or NONE_FITS

    @property
    def step_ratio(self) -> float | None:
        """The staged step's time over the mode's (below 1: DTR is faster); None when none fits."""
        return None if self.staged_step_s is None else self.staged_step_s / self.step_s


def at_matched_memory(points: Iterable) -> tuple[Matched, ...]:
    """A row for each point of one model that is not staged, measured (not skipped) and counted by
    MATCHED_KIND, in the points' order: the fastest of the measured staged points whose peak is at most
    its own (the first of equals, in the points' order)."""
    points = list(points)
    staged = [p for p in points if p.mode == "staged" and p.peak_bytes is not None]
    rows = []
    for p in points:
        if p.mode == "staged" or p.peak_bytes is None or p.peak_kind != MATCHED_KIND:
            continue
        fits = [s for s in staged if s.peak_bytes <= p.peak_bytes]
        if not fits:
            rows.append(Matched(p.model, p.label, p.peak_bytes, p.step_s, None, None, None, NONE_FITS))
            continue
        best = min(fits, key=lambda s: s.step_s)
        rows.append(Matched(p.model, p.label, p.peak_bytes, p.step_s, best.label, best.peak_bytes, best.step_s,
                            DTR_WINS if best.step_s < p.step_s else DTR_LOSES))
    return tuple(rows)
