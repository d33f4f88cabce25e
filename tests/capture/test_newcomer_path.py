"""A newcomer's own model, end to end: `capture`, `scan`, `rank` and `run --check` at ratios 1.0, 0.7
and 0.4 (issue 24's path), on user steps with Adam, with BatchNorm and SGD with momentum, and with a
write through a view. Each command gives a result, never a traceback; the live runs agree with
the simulated outcomes and are bitwise a plain step's wherever they finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

import user_steps  # noqa: E402 (tests/capture: the user's steps)
from conftest import cli_invoke  # noqa: E402

STEPS_FILE = Path(user_steps.__file__)
RATIOS = ("1.0", "0.7", "0.4")



def _json(done) -> dict:
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)

@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_adam", "cnn_momentum", "mlp_view_write"])
def test_a_newcomers_model_through_capture_scan_rank_and_run_check(name, tmp_path):
    script = f"{STEPS_FILE}:{name}"
    trace, store = tmp_path / f"{name}.log.gz", tmp_path / "results.duckdb"
    _json(cli_invoke("capture", "--script", script, "--out", str(trace), "--json", check=True))

    scan = _json(cli_invoke("scan", trace, "--ratios", ",".join(RATIOS), "--store", store, "-j", "1", "--json",
                            check=True))
    simulated = {round(row["ratio"], 3): row for row in scan["runs"]}
    assert sorted(simulated) == sorted(float(r) for r in RATIOS)
    assert simulated[1.0]["outcome"] == "ok" and simulated[1.0]["evictions"] == 0

    rank = _json(cli_invoke("rank", str(trace), "-p", "dtr", "--ratios", ",".join(RATIOS), "--store", str(store),
                            "-j", "1", "--json", check=True))
    (row,) = [r for r in rank["rows"] if r["trace"] == name]
    assert row["policy"] == "dtr" and row["grid_runs"] == len(RATIOS)
    assert row["grid_feasible"] == sum(run["outcome"] == "ok" for run in simulated.values())
    assert row["min_feasible_ratio"] == min(r for r, run in simulated.items() if run["outcome"] == "ok")

    for ratio in RATIOS:
        ran = _json(cli_invoke("run", "--script", script, "--ratio", ratio, "--check", "--compare-sim", "--threads",
                               "1", "--json", check=True))
        (live,) = ran["steps"]
        assert live["outcome"] == simulated[float(ratio)]["outcome"]
        if live["outcome"] == "ok":
            assert live["check"]["equal"] and live["check"]["differing"] == []
            assert ran["same_decisions"] == [True]
        else:
            assert live["check"] is None
