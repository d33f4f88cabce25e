"""The DuckDB results store: rows as results, per-storage counts, schema checks, export."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from dtrlab.errors import UsageError
from dtrlab.sweep.store import (EXPORT_COLUMNS, SCHEMA_VERSION, Store, export, results_dataframe)
from dtrlab.sweep.worker import timeout_result
from sweep_helpers import needs_shared, oracle, resnet_specs

pytestmark = needs_shared
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def finished():
    """Two real resnet32 runs with the results the simulator gives them."""
    specs = resnet_specs([0.2, 0.3])
    return [(s, oracle(s)) for s in specs]


def _one_line_usage_error(call) -> str:
    with pytest.raises(UsageError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_put_stores_the_result_as_a_row(tmp_path, finished):
    path = tmp_path / "r.duckdb"
    with Store(path) as store:
        for spec, result in finished:
            store.put(spec, result, wall_s=0.5)
        assert store.keys() == {s.key for s, _ in finished}
        assert len(store) == 2
    frame = results_dataframe(path)
    assert list(frame.columns) == list(EXPORT_COLUMNS)
    for spec, result in finished:
        row = frame.set_index("key").loc[spec.key]
        assert row["outcome"] == result.outcome and row["overhead"] == result.overhead
        for name in ("clock_ns", "remat_ns", "evictions", "eager_evictions", "distinct_evicted",
                     "peak_bytes", "score_evals", "baseline_compute_ns", "baseline_peak_bytes"):
            assert row[name] == getattr(result, name), name
        assert (row["trace"], row["policy"], row["runtime"], row["ratio"], row["budget_bytes"]) == \
            (spec.trace, spec.policy, spec.runtime, spec.ratio, spec.budget_bytes)
        assert row["engine"] == result.engine and row["wall_s"] == 0.5 and row["seed"] == 0


def test_rows_survive_reopening_and_a_rerun_replaces_a_timeout(tmp_path, finished):
    path = tmp_path / "r.duckdb"
    spec, result = finished[0]
    with Store(path) as store:
        store.put(spec, timeout_result(spec), wall_s=1.0, timeout_s=1.0)
        assert store.timed_out() == {spec.key: 1.0}
        row = store.rows().iloc[0]
        assert row["outcome"] == "timeout" and pd.isna(row["overhead"]) and pd.isna(row["clock_ns"])
    with Store(path) as store:
        assert store.keys() == {spec.key}
        store.put(spec, result, wall_s=2.0, timeout_s=10.0)
        assert store.timed_out() == {}
        rows = store.rows()
    assert len(rows) == 1 and rows.iloc[0]["outcome"] == result.outcome
    assert rows.iloc[0]["clock_ns"] == result.clock_ns


def test_per_storage_counts_go_to_their_own_table(tmp_path, finished):
    spec, result = finished[0]
    with Store(tmp_path / "r.duckdb") as store:
        store.put(spec, result, 0.1, per_storage={7: (2, 0, 1), 3: {"heuristic_evictions": 1,
                                                                 "eager_evictions": 1,
                                                                 "rematerializations": 0}})
        table = store.storage_evictions(spec.key)
        assert table.values.tolist() == [[3, 1, 1, 0], [7, 2, 0, 1]]
        store.put(spec, result, 0.1, per_storage=[(5, 4, 0, 4)])  # a rerun replaces them
        assert store.storage_evictions(spec.key).values.tolist() == [[5, 4, 0, 4]]


def test_a_failed_put_leaves_nothing_behind(tmp_path, finished):
    spec, result = finished[0]
    with Store(tmp_path / "r.duckdb") as store:
        with pytest.raises(duckdb.ConstraintException):  # storage 1 twice: fails mid-transaction
            store.put(spec, result, 0.1, per_storage=[(1, 2, 3, 4), (1, 0, 0, 0)])
        assert store.keys() == set()
        store.put(spec, result, 0.1)
        assert store.keys() == {spec.key}


def test_a_file_that_is_not_duckdb_is_one_clear_line(tmp_path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"these are not the bytes of a database\n" * 200)
    message = _one_line_usage_error(lambda: Store(junk))
    assert str(junk) in message and "not a dtrlab results store" in message
    assert junk.read_bytes().startswith(b"these are not")  # untouched
    _one_line_usage_error(lambda: results_dataframe(junk))


def test_a_foreign_duckdb_file_is_one_clear_line(tmp_path):
    foreign = tmp_path / "other.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE runs (key VARCHAR, x INTEGER)")
    con.close()
    assert "not a dtrlab results store" in _one_line_usage_error(lambda: Store(foreign))
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE meta (app VARCHAR, schema_version INTEGER)")
    con.execute("INSERT INTO meta VALUES ('someone-else', 1)")
    con.close()
    assert "not a dtrlab results store" in _one_line_usage_error(lambda: Store(foreign))


# Schema 0 predates every store dtrlab made; schema 1 is migrated (tests/optimal/test_optimal_sweep.py).
@pytest.mark.parametrize("version, word", [(0, "older"), (SCHEMA_VERSION + 1, "newer")])
def test_another_schema_version_is_one_clear_line(tmp_path, version, word):
    path = tmp_path / "old.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET schema_version = ?", [version])
    con.close()
    message = _one_line_usage_error(lambda: Store(path))
    assert word in message and f"schema {version}" in message


def test_missing_store_folder_and_lock_are_one_line(tmp_path):
    assert "no such results store" in _one_line_usage_error(
        lambda: results_dataframe(tmp_path / "absent.duckdb"))
    assert "does not exist" in _one_line_usage_error(lambda: Store(tmp_path / "no" / "r.duckdb"))
    assert "folder" in _one_line_usage_error(lambda: Store(tmp_path))
    path = tmp_path / "busy.duckdb"
    with Store(path):
        code = ("import sys; from dtrlab.sweep.store import Store; from dtrlab.errors import UsageError\n"
                "try: Store(sys.argv[1])\nexcept UsageError as e: print(e)")
        # Another process: the store's lock is between processes (this one holds it open).
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                             env={"PYTHONPATH": str(SRC)}, check=True)
    assert "in use by another process" in out.stdout and out.stdout.count("\n") == 1


def test_export_csv_and_parquet(tmp_path, finished, capsys):
    path = tmp_path / "r.duckdb"
    with Store(path) as store:
        for spec, result in finished:
            store.put(spec, result, 0.25)
        store.put(*_timeout_of(finished), 0.5, timeout_s=0.5)
    expected = results_dataframe(path)
    assert len(expected) == 3

    assert export(path, "csv", tmp_path / "r.csv") == 3
    from_csv = pd.read_csv(tmp_path / "r.csv")
    assert export(path, "parquet", tmp_path / "r.parquet") == 3
    from_parquet = pd.read_parquet(tmp_path / "r.parquet")
    assert export(path, "csv") == 3
    from_stdout = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))

    for frame in (from_csv, from_parquet, from_stdout):
        assert list(frame.columns) == list(EXPORT_COLUMNS)
        assert frame["key"].tolist() == expected["key"].tolist()
        for column in ("trace", "policy", "runtime", "ratio", "budget_bytes", "outcome", "overhead",
                       "evictions", "distinct_evicted", "clock_ns"):
            pd.testing.assert_series_equal(frame[column], expected[column], check_dtype=False,
                                           check_exact=True, obj=column)
    assert not list(tmp_path.glob("*.partial"))


def _timeout_of(finished):
    spec, _ = finished[0]
    spec = replace(spec, budget_bytes=spec.budget_bytes + 1)
    return spec, timeout_result(spec)


def test_export_mistakes_are_one_line(tmp_path):
    path = tmp_path / "r.duckdb"
    Store(path).close()
    assert "--out" in _one_line_usage_error(lambda: export(path, "parquet"))
    assert "format" in _one_line_usage_error(lambda: export(path, "xlsx", tmp_path / "x"))
    assert "does not exist" in _one_line_usage_error(lambda: export(path, "csv", tmp_path / "no" / "x.csv"))
