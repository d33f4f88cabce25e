"""Parity on programs read from simrd's own logs.zip layout: a sample of the reference rows, exactly."""

from __future__ import annotations

import functools

import pytest

from conftest import SIMRD_ZIP, needs_shared, needs_simrd_zip, parity_rows
from dtrlab.trace import load
from helpers import check_row

pytestmark = [needs_shared, needs_simrd_zip]


@functools.lru_cache(maxsize=None)
def zip_program(name: str):
    (program,) = load(SIMRD_ZIP, [name], cache=False)
    return program


def _sample() -> list[dict]:
    """The first two rows of each trace, and every row on another runtime than the paper's."""
    if not SIMRD_ZIP.is_file():
        return []
    seen: dict[str, int] = {}
    rows = []
    for row in parity_rows():
        seen[row["trace"]] = seen.get(row["trace"], 0) + 1
        if seen[row["trace"]] <= 2 or (row["runtime"] != "RuntimeV2EagerOptimized" and row["trace"] != "lstm"):
            rows.append(row)
    return rows


@pytest.mark.parametrize("row", _sample(), ids=lambda r: f"{r['trace']}-{r['heuristic']}-{r['runtime']}-{r['ratio']}")
def test_zip_program_matches_reference(row):
    check_row(zip_program(row["trace"]), row, "auto")


def test_the_sample_covers_every_trace_and_runtime():
    rows = _sample()
    assert {r["trace"] for r in rows} == {r["trace"] for r in parity_rows()}
    assert {r["runtime"] for r in rows} == {r["runtime"] for r in parity_rows()}
