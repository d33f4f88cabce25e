"""DTR's envelope: at each budget the least overhead of the runs at or below it, by hand and against a
plain double loop over every pair of runs."""

from __future__ import annotations

import random

from dtrlab.analysis.envelope import envelope, envelope_at
from dtrlab.analysis.runs import Run


def _runs(*cells):
    return [Run(b / 100, b, "ok" if o is not None else "oom", o) for b, o in cells]


def test_by_hand_an_oom_and_a_pathological_budget_take_the_smaller_budgets_overhead():
    runs = _runs((10, None), (20, 3.0), (30, None), (40, 5.0), (50, 2.0), (60, 2.5))
    points = envelope(runs)
    assert [p.overhead for p in points] == [None, 3.0, 3.0, 3.0, 2.0, 2.0]
    assert [p.from_budget_bytes for p in points] == [None, 20, 20, 20, 50, 50]
    assert envelope_at(points, 5) is None and envelope_at(points, 45) == 3.0 and envelope_at(points, 10**9) == 2.0


def test_the_envelope_is_the_least_overhead_at_or_below_each_budget():
    rng = random.Random(7)
    for _ in range(50):
        cells = [(rng.randrange(1, 40), rng.choice([None, rng.uniform(1, 5)])) for _ in range(rng.randrange(1, 15))]
        runs = _runs(*cells)
        points = envelope(runs)
        budgets = sorted({b for b, _ in cells})
        assert [p.budget_bytes for p in points] == budgets
        for p in points:
            below = [o for b, o in cells if b <= p.budget_bytes and o is not None]
            assert p.overhead == (min(below) if below else None)
        for b in range(0, 42):
            below = [o for c, o in cells if c <= b and o is not None]
            assert envelope_at(points, b) == (min(below) if below else None)
