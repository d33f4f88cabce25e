"""Parity with the reference simulator: every row of ../shared/reference/parity.jsonl, exactly."""

from __future__ import annotations

import pytest

from conftest import REFERENCE, needs_shared, parity_rows, public_program
from helpers import check_row

pytestmark = needs_shared


def _rows():
    if not (REFERENCE / "parity.jsonl").exists():
        return []
    return list(parity_rows())


def _id(row):
    return f"{row['trace']}-{row['heuristic']}-{row['runtime']}-{row['ratio']}"


def _check(row, engine):
    check_row(public_program(row["trace"]), row, engine)


@pytest.mark.parametrize("row", _rows(), ids=_id)
def test_row_matches_reference(row):
    """The default engine (compiled where it applies) reproduces the row bit for bit."""
    _check(row, "auto")


@pytest.mark.parametrize("row", [r for r in _rows() if r["trace"] in ("resnet32", "unet")], ids=_id)
def test_row_matches_reference_on_python_engine(row):
    """The pure-Python engine, the oracle the compiled one is held to, matches the reference too."""
    _check(row, "python")
