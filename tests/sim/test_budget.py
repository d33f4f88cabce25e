"""One budget notation (sim.simulate.parse_budget): a decimal point makes a ratio of the unbounded
peak, a whole number or a unit makes bytes; the diagnostics' --between reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_invoke
from dtrlab.errors import UsageError
from dtrlab.sim.simulate import baseline, parse_budget
from dtrlab.trace import load_one

TINY = Path(__file__).resolve().parents[2] / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"


@pytest.fixture(scope="module")
def program():
    return load_one(str(TINY), None, cache=False)


@pytest.mark.parametrize("text, ratio, nbytes", [
    ("1.0", 1.0, None), ("0.5", 0.5, None), (" 0.104 ", 0.104, None), ("1e-1", 0.1, None),
    ("1046362631", None, 1046362631), ("1", None, 1), ("2GiB", None, 2 * 1024 ** 3),
    ("512MB", None, 512 * 10 ** 6), ("1.5KiB", None, 1536), ("300 B", None, 300),
])
def test_the_notation(program, text, ratio, nbytes):
    budget = parse_budget(program, text)
    assert budget.ratio == ratio
    peak = baseline(program).peak_bytes
    assert budget.budget_bytes == (int(peak * ratio) if ratio is not None else nbytes)
    assert budget.label == (f"{ratio:g}" if ratio is not None else f"{nbytes} B")


@pytest.mark.parametrize("text, says", [
    ("abc", "a ratio of the unbounded peak has a decimal point"), ("-0.5", "must be positive"),
    ("0", "must be positive"), ("3XB", "bytes are a whole number"), ("3 kbit", "unknown unit 'kbit'"), ("inf", "must be positive"),
])
def test_a_budget_that_is_no_budget_is_one_line(program, text, says):
    with pytest.raises(UsageError, match=says.replace("(", r"\(")):
        parse_budget(program, text)


def test_compare_reads_1_0_as_the_whole_peak_not_one_byte(program):
    res = cli_invoke("compare", TINY, "--between", "0.9", "1.0", "--json")
    assert res.exit_code == 0, res.output
    b = json.loads(res.output)["b"]
    assert (b["ratio"], b["budget_bytes"]) == (1.0, baseline(program).peak_bytes)
