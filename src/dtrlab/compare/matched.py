"""The comparison at matched memory: for each mode that is not DTR's, the fastest DTR step whose
measured peak is no higher, and whether DTR wins or loses there.

Owns the rule and its rows (Matched). Only peaks counted alike are set side by side (DTR_MODE_OF): a
point counted by live storages (the eager modes) is matched against the staged steps, counted alike;
a compiled point, counted by the allocator, against the compiled steps with DTR's knapsack
(compile-dtr). A counter with no DTR point has no rows. Reads Points by their fields alone (no torch
here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

DTR_WINS, DTR_LOSES, NONE_FITS = "DTR wins", "DTR loses", "no DTR step fits"
# Each peak counter (compare.modes.Runner.peak_kind) and the DTR mode whose points are counted by it.
DTR_MODE_OF = {"storages": "staged", "allocator": "compile-dtr"}


@dataclass(frozen=True)
class Matched:
    """One mode's point against the fastest DTR step (of the mode counted alike) at most as high: the DTR
    step's label, peak and step time are None when none fits. DTR wins when that step is faster, and
    loses otherwise."""

    model: str
    label: str  # the mode's (compare.Mode.label: "checkpoint", "sac", "plain", "compile 0.5")
    peak_bytes: int
    step_s: float
    staged: str | None  # the DTR step's label ("staged 0.7", "compile-dtr 0.9"), None: none fits
    staged_peak_bytes: int | None
    staged_step_s: float | None
    verdict: str  # DTR_WINS, DTR_LOSES or NONE_FITS

    @property
    def step_ratio(self) -> float | None:
        """The DTR step's time over the mode's (below 1: DTR is faster); None when none fits."""
        return None if self.staged_step_s is None else self.staged_step_s / self.step_s


def at_matched_memory(points: Iterable) -> tuple[Matched, ...]:
    """A row for each measured (not skipped) point of one model that is not a DTR mode's and whose
    counter has measured DTR points, in the points' order: the fastest of those whose peak is at most
    its own (the first of equals, in the points' order)."""
    points = [p for p in points if p.peak_bytes is not None]
    dtr_modes = set(DTR_MODE_OF.values())
    rows = []
    for p in points:
        dtr = [s for s in points if s.mode == DTR_MODE_OF.get(p.peak_kind) and s.peak_kind == p.peak_kind]
        if p.mode in dtr_modes or not dtr:
            continue
        fits = [s for s in dtr if s.peak_bytes <= p.peak_bytes]
        if not fits:
            rows.append(Matched(p.model, p.label, p.peak_bytes, p.step_s, None, None, None, NONE_FITS))
            continue
        best = min(fits, key=lambda s: s.step_s)
        rows.append(Matched(p.model, p.label, p.peak_bytes, p.step_s, best.label, best.peak_bytes, best.step_s,
                            DTR_WINS if best.step_s < p.step_s else DTR_LOSES))
    return tuple(rows)
