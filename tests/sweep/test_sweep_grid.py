"""Budget grids: exact decimal ranges, byte budgets, refinement, RunSpec keys and the cross product."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dtrlab.errors import UsageError
from dtrlab.sim.simulate import budget_from_ratio
from dtrlab.sweep import grid
from dtrlab.sweep.grid import (Point, RunSpec, between, parse_budget_bytes, parse_ratios, refine)
from sweep_helpers import needs_shared, program, resnet_specs

SRC = Path(__file__).resolve().parents[2] / "src"


# --- ratios -----------------------------------------------------------------------------------


def test_third_decimal_range_is_exact():
    ratios = parse_ratios("0.090:0.120:0.001")
    assert len(ratios) == 31
    assert ratios == tuple(float(f"0.{90 + i:03d}") for i in range(31))
    assert ratios[0] == float("0.09") and ratios[1] == float("0.091") and ratios[-1] == float("0.12")
    # The float way drifts: this is what the decimal arithmetic is for.
    assert 0.09 + 10 * 0.001 != float("0.1")
    assert float("0.1") in ratios


def test_fourth_decimal_range_is_exact():
    ratios = parse_ratios("0.1000:0.1010:0.0001")
    assert ratios == tuple(float(s) for s in ("0.1", "0.1001", "0.1002", "0.1003", "0.1004", "0.1005",
                                               "0.1006", "0.1007", "0.1008", "0.1009", "0.101"))


def test_range_stops_at_the_last_point_not_past_stop():
    assert parse_ratios("0.1:0.35:0.1") == (0.1, 0.2, 0.3)


def test_lists_and_ranges_mix_sorted_and_unique():
    assert parse_ratios("0.3, 0.1,0.1:0.2:0.05,0.2") == (0.1, 0.15, 0.2, 0.3)


@given(start=st.integers(1, 5000), count=st.integers(1, 60), step=st.integers(1, 50),
       digits=st.integers(2, 6))
def test_every_range_point_is_the_float_of_its_literal(start, count, step, digits):
    q = Decimal(1).scaleb(-digits)
    lo, d = Decimal(start) * q, Decimal(step) * q
    hi = lo + (count - 1) * d
    ratios = parse_ratios(f"{lo}:{hi}:{d}")
    assert ratios == tuple(float(str(lo + i * d)) for i in range(count))


@pytest.mark.parametrize("spec, words", [
    ("", "empty"), ("0.1,,0.2", "empty item"), ("abc", "not a number"), ("0.1:0.2", "START:STOP:STEP"),
    ("0.2:0.1:0.01", "stops before it starts"), ("0.1:0.2:0", "step"), ("0.1:0.2:-0.01", "step"),
    ("0", "not positive"), ("-0.1", "not positive"), ("nan", "finite"), ("0:1:0.0000001", "points"),
])
def test_bad_ratio_specs_are_one_line_usage_errors(spec, words):
    with pytest.raises(UsageError, match=words) as info:
        parse_ratios(spec)
    assert "\n" not in str(info.value)


def test_budget_bytes_lists_and_ranges():
    assert parse_budget_bytes("3000,1000") == (1000, 3000)
    assert parse_budget_bytes("1000:1300:100") == (1000, 1100, 1200, 1300)
    for bad in ("1.5", "-1", "x"):
        with pytest.raises(UsageError):
            parse_budget_bytes(bad)


# --- refinement -------------------------------------------------------------------------------


def test_between_uses_the_next_decimal_digit():
    assert between(0.091, 0.092, 9) == [float(f"0.091{i}") for i in range(1, 10)]
    assert between(0.1, 0.2, 1) == [0.15]
    assert between(0.1, 0.2, 3) == [0.12, 0.15, 0.18]
    # More points than one digit holds: a digit finer still.
    assert between(0.1, 0.2, 10) == sorted(set(between(0.1, 0.2, 10)))
    assert len(between(0.1, 0.2, 10)) == 10 and all(0.1 < r < 0.2 for r in between(0.1, 0.2, 10))
    assert all(len(repr(r)) <= len("0.123") for r in between(0.1, 0.2, 10))  # short decimals, no float noise


def test_refine_where_outcome_or_overhead_jumps():
    points = [Point(0.1, "oom", 0.4), Point(0.2, "ok", 3.0), Point(0.3, "ok", 2.9),
              Point(0.4, "ok", 1.5), Point(0.5, "ok", 1.49)]
    # 0.1-0.2: outcome differs; 0.3-0.4: 2.9/1.5 > 1.1; the others are within the factor.
    assert refine(points, 1, 1.1) == (0.15, 0.35)
    assert refine(points, 2, 1.1) == (0.13, 0.17, 0.33, 0.37)
    assert refine(points, 1, 2.0) == (0.15,)


def test_refine_ignores_timeouts_and_the_overheads_of_failed_runs():
    points = [Point(0.1, "oom", 0.1), Point(0.2, "oom", 5.0), Point(0.3, "timeout", None),
              Point(0.4, "oom", 1.0)]
    assert refine(points, 1, 1.05) == ()


def test_refine_never_repeats_a_known_ratio():
    points = [Point(0.1, "oom", 1.0), Point(0.15, "ok", 2.0), Point(0.2, "ok", 1.0)]
    new = refine(points, 1, 1.5)
    assert new == (0.125, 0.175) and not set(new) & {0.1, 0.15, 0.2}


# --- RunSpec ----------------------------------------------------------------------------------

SPEC = RunSpec("resnet32", "ab" * 32, "/traces", "dtr", "eager-optimized", 1_000_000, 0.1, None, 0, "auto")


def test_key_ignores_where_how_and_which_ratio_spelling():
    assert SPEC.key == replace(SPEC).key
    for same in (replace(SPEC, source="/elsewhere/logs.zip"), replace(SPEC, engine="python"),
                 replace(SPEC, ratio=None), replace(SPEC, trace="renamed")):
        assert same.key == SPEC.key


def test_key_changes_with_everything_that_decides_a_result():
    others = [replace(SPEC, trace_sha256="cd" * 32), replace(SPEC, policy="lru"),
              replace(SPEC, runtime="eager"), replace(SPEC, budget_bytes=1_000_001),
              replace(SPEC, overhead_limit=2.0), replace(SPEC, seed=1)]
    keys = {SPEC.key} | {s.key for s in others}
    assert len(keys) == len(others) + 1


def test_key_changes_with_the_semantics_version(monkeypatch):
    before = replace(SPEC).key
    monkeypatch.setattr(grid, "SEMANTICS_VERSION", grid.SEMANTICS_VERSION + 1)
    assert replace(SPEC).key != before


def test_key_is_the_same_in_a_fresh_interpreter():
    code = ("from dtrlab.sweep.grid import RunSpec; "
            f"print(RunSpec('resnet32', {'ab' * 32!r}, '/traces', 'dtr', 'eager-optimized', 1000000, 0.1).key)")
    env = dict(os.environ, PYTHONPATH=str(SRC), PYTHONHASHSEED="123")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == SPEC.key
    assert re.fullmatch("[0-9a-f]{64}", SPEC.key)


# --- the cross product ------------------------------------------------------------------------


@needs_shared
def test_cross_product_of_policies_runtimes_and_budgets():
    p = program("resnet32")
    specs = resnet_specs([0.2, 0.3], policies=["dtr", "LRU"], runtimes=["eager-optimized", "optimized"],
                         budgets_bytes=[10**9])
    assert len(specs) == 2 * 2 * 3
    assert {s.policy for s in specs} == {"dtr", "lru"}  # the reference name LRU is the same policy
    assert len({s.key for s in specs}) == len(specs)
    by_ratio = [s for s in specs if s.ratio == 0.3 and s.policy == "dtr" and s.runtime == "optimized"]
    assert by_ratio[0].budget_bytes == budget_from_ratio(p, 0.3)
    assert by_ratio[0].trace == "resnet32" and by_ratio[0].trace_sha256 == p.sha256


@needs_shared
def test_ratios_that_round_to_one_budget_are_one_run():
    p = program("resnet32")
    peak = budget_from_ratio(p, 1.0)
    tiny = 1 / (4 * peak)  # far below one byte of difference
    specs = resnet_specs([0.25, 0.25 + tiny])
    assert budget_from_ratio(p, 0.25) == budget_from_ratio(p, 0.25 + tiny)
    assert len(specs) == 1 and specs[0].ratio == 0.25


@needs_shared
def test_bad_names_and_options_are_usage_errors():
    with pytest.raises(UsageError, match="unknown policy"):
        resnet_specs([0.2], policies=["nope"])
    with pytest.raises(UsageError, match="needs the e"):
        resnet_specs([0.2], policies=["dtr"], runtimes=["eager"])
    with pytest.raises(UsageError, match="overhead limit"):
        resnet_specs([0.2], overhead_limit=0.5)
    with pytest.raises(UsageError, match="engine"):
        resnet_specs([0.2], engine="gpu")
    with pytest.raises(UsageError, match="budgets"):
        resnet_specs([])


def test_two_formulas_under_one_name_never_share_a_key_nor_two_names_of_one_formula():
    from dtrlab.sim.policies import POLICIES, register_policy

    try:
        register_policy("test-one-name", "score: compute / size", replace=True)
        first = replace(SPEC, policy="test-one-name").key
        register_policy("test-one-name", "score: compute / (size * staleness)", replace=True)
        assert replace(SPEC, policy="test-one-name").key != first
    finally:
        POLICIES.pop("test-one-name", None)
    # ab-e-size-stale is DTR's formula under another name: its rows keep their own name.
    assert replace(SPEC, policy="ab-e-size-stale").key != replace(SPEC, policy="dtr").key
