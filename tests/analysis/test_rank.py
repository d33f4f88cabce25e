"""`dtrlab rank` on a public trace: every figure of its table against a computation straight from
`simulate` (a hand-written walk over the budgets, not the analyses it reuses); it resumes."""

from __future__ import annotations

import json

import pytest
from conftest import TRACES, cli_invoke, needs_shared, public_program

from dtrlab.sim.simulate import budget_from_ratio, simulate
from dtrlab.sweep.grid import parse_ratios

pytestmark = needs_shared

GRID, FINE = "0.1:1.0:0.1", "0.095:0.110:0.001"
FORMULA = "score: (compute + estar) / (size * staleness ** 2)"
LIMIT = 10.0


def expected(program, policy: str) -> dict:
    """The leaderboard's figures for one (policy, trace), from simulate and plain loops."""
    grid, fine = parse_ratios(GRID), parse_ratios(FINE)
    by_budget = {}
    for ratio in sorted(set(grid) | set(fine)):
        budget = budget_from_ratio(program, ratio)
        if budget not in by_budget:
            by_budget[budget] = (ratio, simulate(program, budget, policy, overhead_limit=LIMIT))
    runs = [by_budget[b] for b in sorted(by_budget)]
    ok_grid = [res.overhead for ratio, res in runs if ratio in grid and res.outcome == "ok"]
    ok = [(ratio, res.overhead) for ratio, res in runs if res.outcome == "ok"]
    factors = [max(a, b) / min(a, b) for (_, a), (_, b) in zip(ok, ok[1:])]
    outcomes = "".join("o" if res.outcome == "ok" else "x" for _, res in runs)
    inversions = len([part for part in outcomes.strip("x").split("o") if part])
    return {"grid_runs": sum(r in grid for r, _ in runs), "grid_feasible": len(ok_grid),
            "mean_overhead": sum(ok_grid) / len(ok_grid), "min_feasible_ratio": min(r for r, _ in ok),
            "budgets": len(runs), "switches": sum(f > 2.0 for f in factors),
            "max_neighbour_factor": max(factors), "inversions": inversions}


@pytest.mark.slow
def test_the_table_is_what_simulate_says_and_a_second_run_simulates_nothing(tmp_path):
    store = tmp_path / "rank.duckdb"
    args = ["rank", TRACES, "-t", "resnet32", "-p", "dtr", "-p", FORMULA, "-p", "lru", "--ratios", GRID,
            "--fine", FINE, "--overhead-limit", LIMIT, "--store", store, "-j", 2, "--json"]
    res = cli_invoke(*args, "--plot", str(tmp_path / "rank.png"))
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    program = public_program("resnet32")
    rows = {(r["policy"], r["trace"]): r for r in out["rows"]}
    seen_inversion = False
    for policy in ("dtr", FORMULA, "lru"):
        want = expected(program, policy)
        got = rows[(policy, "resnet32")]
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-12), (policy, key)
        everywhere = rows[(policy, "all")]  # one trace: the row over every trace is the same figures
        assert {k: everywhere[k] for k in want} == {k: got[k] for k in want}
        seen_inversion |= want["inversions"] > 0
    assert seen_inversion  # resnet32's study inversion lies in the fine window
    # best first: most feasible grid budgets, then the lowest mean overhead
    order = [r["policy"] for r in out["rows"] if r["trace"] == "all"]
    keys = [(-rows[(p, "all")]["grid_feasible"], rows[(p, "all")]["mean_overhead"]) for p in order]
    assert keys == sorted(keys) and order[-1] == "lru"
    assert (tmp_path / "rank.png").stat().st_size > 10_000
    assert out["runs_new"] > 0 and out["runs_stored"] == 0
    again = json.loads(cli_invoke(*args).stdout)
    assert again["runs_new"] == 0 and again["runs_stored"] == out["runs_new"]
    assert again["rows"] == out["rows"]


def test_rank_text_table_and_mistakes(tmp_path):
    res = cli_invoke("rank", str(TRACES), "-t", "resnet32", "-p", "dtr", "--ratios", "0.2,0.3",
                     "--store", str(tmp_path / "r.duckdb"), "-j", "1")
    assert res.exit_code == 0, res.output
    program = public_program("resnet32")
    mean = sum(simulate(program, budget_from_ratio(program, r), "dtr").overhead for r in (0.2, 0.3)) / 2
    assert f"{mean:.4f}" in res.stdout and "2/2" in res.stdout
    for args, words in ((["--factor", "1"], "--factor must exceed 1"),
                        (["--policy", "nope"], "unknown policy 'nope'"),
                        (["--fine", "0.1:0.2:x"], "ratios")):
        bad = cli_invoke("rank", str(TRACES), "--store", str(tmp_path / "x.duckdb"), *args)
        assert bad.exit_code == 2 and words in bad.stderr and bad.stderr.count("\n") == 1, bad.output
    bad = cli_invoke("rank", str(TRACES), "--executor", "ray")  # click's own check (main: one line)
    assert bad.exit_code == 2 and "'ray' is not one of local, dask" in bad.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_a_fine_scan_named_for_a_trace_runs_on_that_trace_only(tmp_path):
    res = cli_invoke("rank", str(TRACES), "-t", "resnet32", "-t", "unet", "-p", "dtr", "--ratios", "0.3,0.5",
                     "--fine", "resnet32=0.100:0.108:0.001", "--fine", "0.4", "--store",
                     str(tmp_path / "r.duckdb"), "-j", "2", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["fine"] == {"resnet32": list(parse_ratios("0.100:0.108:0.001")), "": [0.4]}
    budgets = {r["trace"]: r["budgets"] for r in out["rows"]}
    # resnet32: the grid, 0.4 and its window's nine (0.101 ok, 0.102-0.106 out of memory: its inversion); unet: 3
    assert budgets == {"resnet32": 12, "unet": 3, "all": 15}
    inversions = {r["trace"]: r["inversions"] for r in out["rows"]}
    program = public_program("resnet32")
    outcomes = [simulate(program, budget_from_ratio(program, r), "dtr").outcome
                for r in parse_ratios("0.100:0.108:0.001")]
    assert inversions["resnet32"] == (1 if "oom" in outcomes[1:-1] and outcomes[-1] == "ok" else 0) == 1
    assert inversions["unet"] == 0
