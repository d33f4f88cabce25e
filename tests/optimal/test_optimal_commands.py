"""`dtrlab optimal` end to end: the JSON's best is the brute-force optimum and the schedule file it
writes passes `dtrlab schedule check` with the same overhead; every mistake is one line and exit 2."""

from __future__ import annotations

import json

import pytest

from brute import brute_force_optimum
from conftest import cli_invoke as run
from dtrlab.sim.simulate import baseline
from dtrlab.trace import load
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import format_trace


def _trace(tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text(format_trace(synthetic_trace(7, 12, max_args=2, max_outputs=2, size_bytes=(4, 64),
                                                 time_ns=(1, 100))))
    (program,) = load(path, cache=False)
    return path, program


def test_optimal_json_is_the_optimum_and_its_schedule_checks(tmp_path):
    path, program = _trace(tmp_path)
    budget = 250  # below the unconstrained peak (276): recomputation is needed
    assert budget < baseline(program).peak_bytes
    out = tmp_path / "best.schedule"
    res = run("optimal", path, "--budget-bytes", budget, "--schedule-out", out, "--json", "-q")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["remat_ns"] == brute_force_optimum(program, budget) and d["remat_ns"] > 0
    assert d["peak_bytes"] <= budget and d["bound_overhead"] <= d["overhead"]
    check = run("schedule", "check", path, out, "--json")
    assert check.exit_code == 0, check.output
    c = json.loads(check.stdout)
    assert c["valid"] and c["made_by"] == "optimal:highs" and c["overhead"] == d["overhead"]


def test_progress_goes_to_stderr_and_the_table_to_stdout(tmp_path):
    path, _ = _trace(tmp_path)
    res = run("optimal", path, "--budget-bytes", 250)
    assert res.exit_code == 0, res.output
    assert "best found (replayed)" in res.stdout and "optimal: " in res.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--budget-bytes", 250, "--time-limit", 0], "--time-limit"),
    (["--budget-bytes", 250, "--threads", 0], "--threads"),
    (["--budget-bytes", 250, "--gap", 1], "--gap"),
    (["--budget-bytes", 250, "--ratio", 0.5], "exactly one"),
    (["--budget-bytes", 250, "--schedule-out", "MISSING/x.schedule"], "no such folder"),
])
def test_bad_arguments_are_one_line(tmp_path, args, fragment):
    path, _ = _trace(tmp_path)
    args = [str(tmp_path / a) if a == "MISSING/x.schedule" else a for a in args]
    res = run("optimal", path, *args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtrlab: ") and fragment in lines[0], res.stderr
