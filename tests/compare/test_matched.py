"""The comparison at matched memory (compare.matched) on hand-made points, against hand-computed rows:
a win, a loss, no DTR step low enough, equals, the points never matched (DTR's own, skipped, or counted
by another counter than the DTR steps'), and compiled points against compiled DTR steps."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")  # compare.Point's label is compare.Mode's

from dtrlab.compare import Point  # noqa: E402
from dtrlab.compare.matched import DTR_LOSES, DTR_WINS, NONE_FITS, Matched, at_matched_memory  # noqa: E402


def _point(mode, setting, peak_bytes, step_ms, kind="storages", skipped=""):
    step_s = None if step_ms is None else step_ms / 1e3
    return Point("m", mode, setting, peak_bytes, step_s, kind, 0.0, skipped)


POINTS = [
    _point("plain", None, 1000, 10.0),
    _point("checkpoint", None, 600, 20.0),
    _point("sac", None, 800, 15.0),
    _point("staged", 1.0, 1100, 9.0),   # above every other mode's peak: never chosen
    _point("staged", 0.8, 800, 12.0),
    _point("staged", 0.6, 650, 18.0),
    _point("staged", 0.5, None, None, skipped="the step does not fit"),
    _point("compile", 0.5, 500, 8.0, kind="allocator"),  # another counter: shown, not matched
]


def test_each_mode_gets_the_fastest_staged_step_at_most_as_high():
    rows = at_matched_memory(POINTS)
    # plain, 1000 B at 10 ms: staged 0.8 (800 B, 12 ms) and 0.6 (650 B, 18 ms) fit; 0.8 is the faster,
    # and slower than plain. checkpoint, 600 B: none of 1100, 800, 650 B is as low. sac, 800 B at 15 ms:
    # 0.8's 800 B is no higher, and 12 ms is faster.
    assert rows == (
        Matched("m", "plain", 1000, 0.010, "staged 0.8", 800, 0.012, DTR_LOSES),
        Matched("m", "checkpoint", 600, 0.020, None, None, None, NONE_FITS),
        Matched("m", "sac", 800, 0.015, "staged 0.8", 800, 0.012, DTR_WINS),
    )
    assert [r.step_ratio for r in rows] == [pytest.approx(1.2), None, pytest.approx(0.8)]


def test_allocator_counted_skipped_and_staged_points_are_never_matched():
    compiled_only = [_point("compile", b, 400, 5.0, kind="allocator") for b in (0.1, 0.9)]
    assert at_matched_memory(compiled_only + POINTS[3:5]) == ()
    no_blocks = [_point("checkpoint", None, None, None, skipped="no blocks"), _point("staged", 1.0, 10, 1.0)]
    assert at_matched_memory(no_blocks) == ()


def test_compiled_points_are_matched_against_compiled_dtr_steps_only():
    points = POINTS + [_point("compile-dtr", 1.0, 450, 7.0, kind="allocator"),
                       _point("compile-dtr", 0.8, 350, 9.0, kind="allocator"),
                       _point("compile", 0.1, 300, 9.0, kind="allocator")]
    rows = at_matched_memory(points)
    # the eager modes' rows as before: a compile-dtr step (allocator) is never a staged one's stand-in
    assert rows[:3] == at_matched_memory(POINTS)
    # compile 0.5 (500 B, 8 ms): compile-dtr 1.0 (450 B, 7 ms) and 0.8 (350 B, 9 ms) fit: 1.0, faster;
    # compile 0.1 (300 B): neither is as low
    assert rows[3:] == (Matched("m", "compile 0.5", 500, 0.008, "compile-dtr 1", 450, 0.007, DTR_WINS),
                        Matched("m", "compile 0.1", 300, 0.009, None, None, None, NONE_FITS))


def test_as_fast_is_a_loss_and_the_first_of_equals_is_chosen():
    points = [_point("plain", None, 1000, 10.0), _point("staged", 0.9, 900, 10.0), _point("staged", 0.7, 700, 10.0)]
    (row,) = at_matched_memory(points)
    assert (row.staged, row.staged_peak_bytes, row.verdict, row.step_ratio) == ("staged 0.9", 900, DTR_LOSES, 1.0)
