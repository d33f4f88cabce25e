"""Switches, regimes, feasibility and overhead inversions on constructed run lists."""

from __future__ import annotations

import random

import pytest

from dtrlab.analysis.feasibility import inversions, overhead_inversions
from dtrlab.analysis.regimes import regimes, switches
from dtrlab.analysis.runs import Run


def runs_of(rows):
    """rows: (ratio, outcome, overhead); budget_bytes = ratio x 1000."""
    return [Run(r, int(round(r * 1000)), o, h) for r, o, h in rows]


ROWS = [
    (0.10, "oom", 9.0),
    (0.11, "ok", 3.0),
    (0.12, "oom", 1.1),
    (0.13, "oom", 1.2),
    (0.14, "ok", 1.4),   # 3.0 -> 1.4: factor 2.14 across a gap
    (0.15, "ok", 1.3),
    (0.16, "ok", 2.9),   # 1.3 -> 2.9: factor 2.23, the larger budget is slower
    (0.17, "timeout", 0.0),
    (0.18, "ok", 1.2),   # 2.9 -> 1.2: factor 2.42
    (0.19, "remat_limit", 5.0),
    (0.20, "ok", 1.1),
]


def test_switches_found_with_both_sides():
    found = switches(runs_of(ROWS))
    assert [(s.lo.ratio, s.hi.ratio) for s in found] == [(0.11, 0.14), (0.15, 0.16), (0.16, 0.18)]
    first, second, third = found
    assert first.across_gap and not second.across_gap and not third.across_gap
    assert first.fast.ratio == 0.14 and first.slow.ratio == 0.11 and not first.upward
    assert second.upward and second.factor == pytest.approx(2.9 / 1.3)
    d = third.to_dict()
    assert (d["ratio_fast"], d["ratio_slow"], d["overhead_fast"], d["overhead_slow"]) == (0.18, 0.16, 1.2, 2.9)
    # the timeout between 0.16 and 0.18 is no gap: nothing failed there
    assert switches(runs_of(ROWS), factor=2.3) == [third]


def test_regimes_are_cut_at_switches_and_labelled():
    found = regimes(runs_of(ROWS))
    assert [[r.ratio for r in g.runs] for g in found] == [[0.11], [0.14, 0.15], [0.16], [0.18, 0.20]]
    assert [g.label for g in found] == ["slow", "fast", "slow", "fast"]
    assert regimes(runs_of([(0.5, "ok", 1.0), (0.6, "ok", 1.5)]))[0].label == "only"
    mixed = regimes(runs_of([(0.1, "ok", 9.0), (0.2, "ok", 3.0), (0.3, "ok", 1.0)]))
    assert [g.label for g in mixed] == ["slow", "mixed", "fast"]


def test_feasibility_inversions_are_intervals():
    found = inversions(runs_of(ROWS))
    assert [(i.last_feasible.ratio, [r.ratio for r in i.infeasible], i.next_feasible.ratio) for i in found] == [
        (0.11, [0.12, 0.13], 0.14), (0.18, [0.19], 0.20)]
    # no feasible budget below: the leading OOM is plain infeasibility, not an inversion
    assert all(i.last_feasible.ratio >= 0.11 for i in found)


def test_overhead_inversions_group_stretches_over_the_cheapest_below():
    found = overhead_inversions(runs_of(ROWS))
    # 0.16 (2.9) pays more than 0.15 (1.3); 0.18 (1.2) is no longer above; 0.14 is below 0.11's 3.0.
    assert [(o.smaller.ratio, [r.ratio for r in o.larger]) for o in found] == [(0.15, [0.16])]
    assert found[0].excess == pytest.approx(1.6)
    assert overhead_inversions(runs_of(ROWS), min_factor=2.5) == []


def test_unsorted_input_is_sorted_by_budget():
    rows = runs_of(ROWS)
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    assert switches(shuffled) == switches(rows)
    assert inversions(shuffled) == inversions(rows)


def test_factor_must_exceed_one():
    with pytest.raises(ValueError):
        switches(runs_of(ROWS), factor=1.0)
