"""The compiled engine's scores are Python's int / int: correctly rounded, ties to even."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import needs_compiled

pytestmark = needs_compiled


def q(num, den):
    from dtrlab.sim._cengine import quotient

    return quotient(num, den)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(st.integers(-(2**62), 2**62), st.integers(1, 2**126))
def test_matches_python_true_division(num, den):
    assert q(num, den) == num / den


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(st.integers(1, 2**40), st.integers(1, 2**40), st.integers(1, 2**40))
def test_matches_on_score_shaped_operands(compute, size, staleness):
    assert q(compute, size * staleness) == compute / (size * staleness)


def test_exact_midpoints_round_to_even():
    # (2**53 + 1) / 1 is halfway between two doubles: Python rounds to even, so must we.
    for num in (2**53 + 1, 2**53 + 3, 2**54 + 2, 2**62 + 2**9):
        assert q(num, 1) == num / 1
    # a quotient whose 64-bit rounding lands on a double midpoint
    for den in (3, 5, 7, 2**60 + 1, 2**64 - 1, 2**64 + 3):
        for num in (2**62 - 1, 2**61 + 12345, 10**18):
            assert q(num, den) == num / den
