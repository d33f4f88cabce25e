"""A run's overhead has one definition (dtrlab.sim.result.run_overhead): the final clock over one
unconstrained step's compute, and none for a run that did not finish. Every command, the results
store and its exports show it the same way: a dash in tables, null in JSON, an empty cell in CSV."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import cli_invoke
from dtrlab.analysis.runs import runs_of
from dtrlab.formats import overhead_text
from dtrlab.sim.result import OK, OOM, REMAT_LIMIT, TIMEOUT, run_overhead
from dtrlab.sim.simulate import budget_from_ratio, simulate
from dtrlab.sweep.grid import RunSpec
from dtrlab.sweep.store import Store, results_dataframe
from dtrlab.trace import load_one, shipped_traces

TINY = str(Path(shipped_traces()).parent / "examples" / "tiny.jsonl")
OOM_RATIO, OK_RATIO = 0.3, 0.9  # tiny's outcomes there (asserted below, from the simulator)


@pytest.fixture(scope="module")
def tiny():
    return load_one(TINY, None, cache=False)


def _result(program, ratio, **kw):
    return simulate(program, budget_from_ratio(program, ratio), "dtr", "eager-optimized", **kw)


def test_the_one_definition(tiny):
    """By hand: clock / compute for a finished run; None for every outcome that did not finish."""
    assert run_overhead(OK, 30, 10) == 3.0
    assert run_overhead(OK, 1, 0) is None  # no compute: nothing to divide by
    for outcome in (OOM, REMAT_LIMIT, TIMEOUT):
        assert run_overhead(outcome, 30, 10) is None
    ok, oom = _result(tiny, OK_RATIO), _result(tiny, OOM_RATIO)
    limited = _result(tiny, OK_RATIO, overhead_limit=1.0)
    assert (ok.outcome, oom.outcome, limited.outcome) == (OK, OOM, REMAT_LIMIT)
    assert ok.overhead == ok.clock_ns / ok.baseline_compute_ns > 1
    assert oom.clock_ns > 1 and oom.overhead is None and oom.to_dict()["overhead"] is None
    assert limited.overhead is None


def test_the_one_formatter():
    assert overhead_text(None) == "-" and overhead_text(float("nan")) == "-"
    assert overhead_text(1.23456) == "1.235" and overhead_text(1.23456, 6) == "1.234560"


def test_simulate_shows_no_overhead_for_an_oom_run(tiny):
    table = cli_invoke("simulate", TINY, "-r", str(OOM_RATIO), check=True).stdout
    row = next(line for line in table.splitlines() if " overhead " in line)
    assert row.split("│")[2].strip() == "-"
    oom = json.loads(cli_invoke("simulate", TINY, "-r", str(OOM_RATIO), "--json", check=True).stdout)
    assert oom["overhead"] is None
    ok = json.loads(cli_invoke("simulate", TINY, "-r", str(OK_RATIO), "--json", check=True).stdout)
    assert ok["overhead"] == _result(tiny, OK_RATIO).overhead


def test_bisect_shows_no_overhead_for_the_oom_side(tiny):
    argv = ["bisect", TINY, "--between", str(OOM_RATIO), str(OK_RATIO)]
    found = json.loads(cli_invoke(*argv, "--json", check=True).stdout)
    (b,) = found["boundaries"]
    assert (b["lo"]["outcome"], b["lo"]["overhead"]) == (OOM, None)
    hi = simulate(tiny, b["hi"]["budget_bytes"], "dtr", "eager-optimized")
    assert b["hi"]["overhead"] == hi.overhead
    table = cli_invoke(*argv, check=True).stdout
    row = next(line for line in table.splitlines() if f"{b['lo']['budget_bytes']:,}" in line)
    assert [c.strip() for c in row.split("│")[1:-1]] == [
        f"{b['lo']['budget_bytes']:,}", OOM, "-", f"{b['hi']['budget_bytes']:,}", OK, f"{hi.overhead:.4f}", "yes"]


def test_timeline_shows_no_overhead_for_an_oom_run(tmp_path):
    line = cli_invoke("timeline", TINY, "-r", str(OOM_RATIO), "-f", "perfetto", "--out", tmp_path / "t.json",
                      check=True).stdout
    assert f"at ratio {OOM_RATIO:g}: oom, overhead - (" in line


def test_compare_shows_no_overhead_for_an_oom_run(tiny):
    table = cli_invoke("compare", TINY, "--between", str(OOM_RATIO), str(OK_RATIO), check=True).stdout
    row = next(line for line in table.splitlines() if line.startswith("│ overhead "))
    assert [c.strip() for c in row.split("│")[2:-1]] == ["-", f"{_result(tiny, OK_RATIO).overhead:.4f}"]
    sides = json.loads(cli_invoke("compare", TINY, "--between", OOM_RATIO, OK_RATIO, "--json", check=True).stdout)
    assert (sides["a"]["outcome"], sides["a"]["overhead"]) == (OOM, None)


def test_scan_json_has_null_overheads_for_oom_runs(tmp_path):
    out = cli_invoke("scan", TINY, "-r", f"{OOM_RATIO},{OK_RATIO}", "--store", tmp_path / "s.duckdb", "--json",
                     "-j", "1", check=True).stdout
    runs = {r["ratio"]: r for r in json.loads(out)["runs"]}
    assert (runs[OOM_RATIO]["outcome"], runs[OOM_RATIO]["overhead"]) == (OOM, None)
    assert runs[OK_RATIO]["overhead"] > 1


def _store_with_an_old_oom_row(path: Path, program) -> None:
    """A store as dtrlab wrote it before the rule: an OOM row holding its stopped clock / compute."""
    with Store(path) as store:
        for ratio in (OOM_RATIO, OK_RATIO):
            result = _result(program, ratio)
            spec = RunSpec(program.name, program.sha256, TINY, "dtr", "eager-optimized",
                           budget_from_ratio(program, ratio), ratio, None, 0, "auto")
            store.put(spec, result, 0.0)
        store._con.execute("UPDATE runs SET overhead = clock_ns / baseline_compute_ns")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_exports_leave_an_oom_runs_overhead_empty_old_rows_included(fmt, tiny, tmp_path):
    path = tmp_path / "old.duckdb"
    _store_with_an_old_oom_row(path, tiny)
    with Store(path, read_only=True) as store:  # the old row holds a number: the store must not show it
        assert store._con.execute("SELECT count(*) FROM runs WHERE outcome = 'oom' AND overhead > 0").fetchone() == (1,)
    out = tmp_path / f"runs.{fmt}"
    cli_invoke("results", "export", "--store", path, "-f", fmt, "--out", out, check=True)
    frame = pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out)
    by_outcome = frame.set_index("outcome")["overhead"]
    assert pd.isna(by_outcome[OOM]) and by_outcome[OK] == _result(tiny, OK_RATIO).overhead
    if fmt == "csv":
        csv = cli_invoke("results", "export", "--store", str(path), "-f", "csv", check=True).stdout
        oom_line = next(line for line in csv.splitlines() if f",{OOM}," in line)
        assert f",{OOM},," in oom_line  # the overhead column follows the outcome, empty
        assert pd.read_csv(io.StringIO(csv)).equals(pd.read_csv(out))
    runs = {r.outcome: r for r in runs_of(results_dataframe(path))}
    assert runs[OOM].overhead is None and runs[OK].overhead == _result(tiny, OK_RATIO).overhead


def test_a_new_store_writes_no_overhead_for_an_oom_run(tiny, tmp_path):
    with Store(tmp_path / "new.duckdb") as store:
        result = _result(tiny, OOM_RATIO)
        spec = RunSpec(tiny.name, tiny.sha256, TINY, "dtr", "eager-optimized",
                       budget_from_ratio(tiny, OOM_RATIO), OOM_RATIO, None, 0, "auto")
        store.put(spec, result, 0.0)
        assert store._con.execute("SELECT outcome, overhead, clock_ns FROM runs").fetchall() == \
            [(OOM, None, result.clock_ns)]
