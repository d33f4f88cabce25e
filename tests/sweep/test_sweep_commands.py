"""`dtrlab sweep` and `dtrlab results export` through the dtrlab command line."""

from __future__ import annotations

import io

import duckdb
import pandas as pd
import pytest

from conftest import cli_invoke
from dtrlab.sweep.store import results_dataframe
from sweep_helpers import TRACES, needs_shared, oracle, resnet_specs

pytestmark = needs_shared


@pytest.mark.slow
def test_sweep_then_export_csv_and_parquet(tmp_path):
    store = tmp_path / "s.duckdb"
    result = cli_invoke("sweep", TRACES, "--trace", "resnet32", "--ratios", "0.20:0.30:0.05", "--policy", "dtr",
                        "--policy", "DTRLocal", "--store", store, "--workers", "2", "--no-progress")
    assert result.exit_code == 0, result.output
    specs = resnet_specs([0.2, 0.25, 0.3], ["dtr", "dtr-local"])
    frame = results_dataframe(store)
    assert sorted(frame["key"]) == sorted(s.key for s in specs)
    by_key = frame.set_index("key")
    for spec in specs:
        assert by_key.loc[spec.key, "clock_ns"] == oracle(spec).clock_ns

    csv = cli_invoke("results", "export", "--store", store, "--format", "csv")
    assert csv.exit_code == 0, csv.output
    printed = pd.read_csv(io.StringIO(csv.stdout))
    assert printed["key"].tolist() == frame["key"].tolist()
    assert printed["overhead"].tolist() == frame["overhead"].tolist()

    out = tmp_path / "s.parquet"
    parquet = cli_invoke("results", "export", "--store", store, "--format", "parquet", "--out", out)
    assert parquet.exit_code == 0, parquet.output
    pd.testing.assert_frame_equal(pd.read_parquet(out)[["trace", "policy", "ratio", "outcome", "evictions"]],
                                  frame[["trace", "policy", "ratio", "outcome", "evictions"]])


@pytest.mark.slow
def test_refine_adds_runs_between_jumps(tmp_path):
    store = tmp_path / "r.duckdb"
    result = cli_invoke("sweep", TRACES, "-t", "resnet32", "--ratios", "0.1,0.2,0.3", "--refine", "1",
                        "--store", store, "--no-progress")
    assert result.exit_code == 0, result.output
    # Overheads 2.22, 1.37, 1.18: both gaps exceed the default factor 1.05, one new ratio each.
    assert sorted(results_dataframe(store)["ratio"]) == [0.1, 0.15, 0.2, 0.25, 0.3]


@pytest.mark.parametrize("args, words", [
    (["--ratios", "0.3:0.1:0.1"], "stops before it starts"),
    ([], "give budgets"),
    (["--ratios", "0.2", "--policy", "nope"], "unknown policy"),
    (["--ratios", "0.2", "--scheduler", "tcp://x:1"], "--executor dask"),
    (["--ratios", "0.2", "--trace", "nosuchtrace"], "no trace matches"),
    (["--budget-bytes", "1000", "--refine", "2"], "give --ratios"),
])
def test_sweep_mistakes_are_one_line(tmp_path, args, words):
    result = cli_invoke("sweep", TRACES, *args, "--store", tmp_path / "x.duckdb", "--no-progress")
    assert result.exit_code == 2 and result.exception is None, result.output  # a user's mistake: no traceback
    (line,) = result.stderr.splitlines()
    assert line.startswith("dtrlab: ") and words in line
    assert not (tmp_path / "x.duckdb").exists()


def test_a_foreign_store_is_one_line_and_left_alone(tmp_path):
    foreign = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE accounts (id INTEGER)")
    con.close()
    for args in (["sweep", TRACES, "-t", "resnet32", "--ratios", "0.3", "--store", foreign, "--no-progress"],
                 ["results", "export", "--store", foreign, "--format", "csv"]):
        result = cli_invoke(*args)
        assert result.exit_code == 2 and result.exception is None, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith("dtrlab: ") and "not a dtrlab results store" in line
    con = duckdb.connect(str(foreign))
    assert [r[0] for r in con.execute("SHOW TABLES").fetchall()] == ["accounts"]
    con.close()
