"""The diagnostics CLI on real traces: scan finds resnet32's inversion, explain-oom its frontier."""

from __future__ import annotations

import json

import pytest
from conftest import TRACES, needs_shared
from conftest import cli_invoke as invoke


@pytest.mark.slow
@needs_shared
def test_scan_reports_the_resnet32_inversion(tmp_path):
    store = tmp_path / "scan.duckdb"
    res = invoke("scan", TRACES, "--trace", "resnet32", "--ratios", "0.090:0.120:0.001", "--json",
                 "--store", store)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    runs = out["runs"]
    assert len(runs) == 31 and runs[0]["ratio"] == 0.09 and runs[-1]["ratio"] == 0.12
    assert [r["budget_bytes"] for r in runs] == sorted(r["budget_bytes"] for r in runs)
    # the study: feasible at 0.101, OOM across 0.102-0.106, feasible again from 0.107
    assert {"last_feasible_ratio": 0.101, "infeasible_ratios": [0.102, 0.103, 0.104, 0.105, 0.106],
            "next_feasible_ratio": 0.107}.items() <= out["inversions"][0].items()
    assert len(out["inversions"]) == 1
    for s in out["regime_switches"]:
        assert s["factor"] > 2.0 and s["overhead_slow"] / s["overhead_fast"] == pytest.approx(s["factor"])
    # the runs went through the store: a second scan reads them back and simulates nothing
    from dtrlab.sweep.store import Store

    with Store(store) as opened:
        stamps = sorted(opened.rows()["created_at"])
    again = invoke("scan", TRACES, "--trace", "resnet32", "--ratios", "0.090:0.120:0.001", "--json",
                   "--store", store)
    assert json.loads(again.output) == out
    with Store(store) as opened:
        assert sorted(opened.rows()["created_at"]) == stamps and len(stamps) == 31


@needs_shared
def test_scan_text_and_a_lower_factor(tmp_path):
    res = invoke("scan", TRACES, "-t", "resnet32", "-r", "0.107,0.110,0.111", "--factor", "1.5",
                 "--store", tmp_path / "s.duckdb")
    assert res.exit_code == 0, res.output
    assert "regime switches" in res.output and "0.111" in res.output


@needs_shared
def test_explain_oom_shows_the_pinned_frontier():
    res = invoke("explain-oom", TRACES, "--trace", "resnet32", "--ratio", "0.104", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["pool_empty"] and out["frontier_exceeds_budget"]
    assert out["pinned_bytes"] + out["locked_bytes"] + out["need_bytes"] > out["budget_bytes"]
    assert out["depth"] == len(out["frames"]) > 10
    text = invoke("explain-oom", TRACES, "-t", "resnet32", "-r", "0.104").output
    assert "evictable pool    empty" in text and "locked by frame" in text


def test_user_mistakes_are_one_line(tmp_path):
    res = invoke("scan", tmp_path / "missing", "--ratios", "0.1", "--store", tmp_path / "s.duckdb")
    assert res.exit_code == 2 and res.output.strip().startswith("dtrlab:")
    res = invoke("scan", tmp_path, "--ratios", "0.2:0.1:0.01", "--store", tmp_path / "s.duckdb")
    assert res.exit_code == 2 and "stops before it starts" in res.output
    res = invoke("explain-oom", tmp_path, "--ratio", "0.1", "--budget-bytes", "5")
    assert res.exit_code == 2 and "exactly one" in res.output


@needs_shared
def test_explain_oom_without_an_oom_is_a_usage_error():
    res = invoke("explain-oom", TRACES, "-t", "resnet32", "-r", "0.5")
    assert res.exit_code == 2 and "does not run out of memory" in res.output
