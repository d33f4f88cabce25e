"""Parity with the reference simulator: every row of ../shared/reference/parity.jsonl, exactly."""

from __future__ import annotations

import pytest

from conftest import REFERENCE, needs_shared, parity_rows, public_program
from dtrlab.sim.simulate import baseline, simulate

pytestmark = needs_shared


def _rows():
    if not (REFERENCE / "parity.jsonl").exists():
        return []
    return list(parity_rows())


def _id(row):
    return f"{row['trace']}-{row['heuristic']}-{row['runtime']}-{row['ratio']}"


def _check(row, engine):
    program = public_program(row["trace"])
    base = baseline(program)
    assert (base.peak_bytes, base.compute_ns) == (row["baseline_memory"], row["baseline_compute"])
    assert int(base.peak_bytes * row["ratio"]) == row["budget"]
    result = simulate(program, row["budget"], row["heuristic"], row["runtime"], engine=engine)
    got = {
        "outcome": "OOM" if result.outcome == "oom" else result.outcome,
        "clock": result.clock_ns,
        "overhead": result.overhead,
        "remat_compute": result.remat_ns,
        "max_memory": result.peak_bytes,
        "evictions_heuristic": result.evictions,
        "distinct_evicted_heuristic": result.distinct_evicted,
        "evictions_eager": result.eager_evictions,
    }
    assert got == {k: row[k] for k in got}


@pytest.mark.parametrize("row", _rows(), ids=_id)
def test_row_matches_reference(row):
    """The default engine (compiled where it applies) reproduces the row bit for bit."""
    _check(row, "auto")


@pytest.mark.parametrize("row", [r for r in _rows() if r["trace"] in ("resnet32", "unet")], ids=_id)
def test_row_matches_reference_on_python_engine(row):
    """The pure-Python engine, the oracle the compiled one is held to, matches the reference too."""
    _check(row, "python")
