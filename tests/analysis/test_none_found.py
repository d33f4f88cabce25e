"""Commands that print tables of findings say "none found" when there are none, never an empty frame."""

from __future__ import annotations

from pathlib import Path


from conftest import cli_invoke
from dtrlab.trace import shipped_traces

TINY = str(Path(shipped_traces()).parent / "examples" / "tiny.jsonl")
FRAME = ("┏", "┃", "└")  # the corners and sides rich draws a table with


def test_scan_with_no_switch_or_inversion(tmp_path):
    # tiny at 0.9 and 0.95: both feasible, their overheads within a factor 2 of each other
    out = cli_invoke("scan", TINY, "-r", "0.9,0.95", "--store", tmp_path / "s.duckdb", "-j", "1", "--mechanisms",
                     check=True).stdout
    assert out.splitlines() == ["tiny: dtr / eager-optimized, 2 budgets, 2 feasible",
                                "regime switches (factor > 2): none found",
                                "feasibility inversions: none found",
                                "mechanisms (reference run / unstable run): none found"]


def test_compare_with_no_re_evicted_storage():
    # budgets far above the peak: nothing is evicted
    out = cli_invoke("compare", TINY, "--between", "60000000", "70000000", check=True).stdout
    assert out.splitlines()[-1] == "most re-evicted storages of the slower run: none found"
    assert sum(any(c in line for c in FRAME) for line in out.splitlines()) == 3  # the runs' table only


def test_bisect_with_no_boundary():
    out = cli_invoke("bisect", TINY, "--between", "0.98", "0.99", check=True).stdout
    assert out.splitlines() == ["boundaries by regime between the two budgets: none found (they behave alike)"]
