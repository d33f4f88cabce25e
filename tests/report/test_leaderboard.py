"""`dtrlab reproduce`'s leaderboard: a user's formula joins it through the pipeline and the store, its
row is what `simulate` says, and two formulas under one name never share stored rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

import dtrlab
from conftest import TRACES, cli_invoke, needs_shared
from dtrlab.analysis.rank import ALL_TRACES
from dtrlab.report.pipeline import reproduce
from dtrlab.report.plan import QUICK
from dtrlab.report.study import STUDY_TRACES
from dtrlab.sim.policies import REMEDY_POLICIES, get_policy, register_policy
from dtrlab.sim.simulate import budget_from_ratio, simulate
from dtrlab.sweep.grid import parse_ratios
from dtrlab.trace import load

GRID, WINDOW = "0.2,0.3,0.5", "0.100:0.108:0.001"
STALE2 = "score: (compute + estar) / (size * staleness ** 2)"
CHEAP = "score: compute / size"
# ResNet-32 alone, a short grid and the inversion's window: the pipeline's every stage, in seconds.
PLAN = replace(QUICK, name="test-leaderboard", policies=("dtr",), coarse_ratios=GRID,
               windows={STUDY_TRACES["resnet32"]: WINDOW}, traces=(STUDY_TRACES["resnet32"],), max_total_operators=None,
               max_oom_explanations=1, max_pairs=1)


def by_hand(program, text: str) -> dict:
    """A leaderboard row's figures for one formula, from simulate and plain loops."""
    grid, fine = parse_ratios(GRID), parse_ratios(WINDOW)
    runs = {}
    for ratio in sorted(set(grid) | set(fine)):
        runs.setdefault(budget_from_ratio(program, ratio), (ratio, simulate(program, budget_from_ratio(program, ratio),
                                                                             text, overhead_limit=PLAN.overhead_limit)))
    ordered = [runs[b] for b in sorted(runs)]
    ok_grid = [res.overhead for ratio, res in ordered if ratio in grid and res.outcome == "ok"]
    outcomes = "".join("o" if res.outcome == "ok" else "x" for _, res in ordered)
    return {"grid_feasible": len(ok_grid), "mean_overhead": sum(ok_grid) / len(ok_grid),
            "min_feasible_ratio": min(r for r, res in ordered if res.outcome == "ok"), "budgets": len(ordered),
            "inversions": len([part for part in outcomes.strip("x").split("o") if part])}


def rows_of(repro, shown: str) -> dict:
    return {r.trace: r for r in repro.leaderboard.rows if r.policy == shown}


@pytest.mark.slow
@needs_shared
def test_a_formula_under_a_name_joins_the_leaderboard_and_a_new_formula_under_it_gets_rows_of_its_own(tmp_path):
    program, = load(str(TRACES), ["resnet32"])
    out = tmp_path / "report"
    try:
        register_policy("test-mine", STALE2, replace=True)
        first = reproduce(str(TRACES), out, plan=PLAN, workers=2, progress=False, policies=("test-mine",))
        register_policy("test-mine", CHEAP, replace=True)  # the same name, another formula, the same folder
        second = reproduce(str(TRACES), out, plan=PLAN, workers=2, progress=False, policies=("test-mine",))
    finally:
        register_policy("test-mine", STALE2, replace=True)
    board = first.leaderboard
    assert board.policies == ("dtr", *REMEDY_POLICIES, "test-mine")
    assert board.fine == ("dtr", *REMEDY_POLICIES, "test-mine") and board.windows == 1
    for repro, text in ((first, STALE2), (second, CHEAP)):
        mine = rows_of(repro, "test-mine")
        want = by_hand(program, text)
        for key, value in want.items():
            assert getattr(mine["resnet32"], key) == pytest.approx(value, rel=1e-12), (text, key)
            assert getattr(mine[ALL_TRACES], key) == pytest.approx(value, rel=1e-12), (text, key)
        assert get_policy(text).text in set(repro.frame["policy"])  # stored under its text, never under the name
    # The second formula was simulated (its grid and window), not read from the first one's rows ...
    assert second.new_runs == len(parse_ratios(GRID)) + len(parse_ratios(WINDOW))
    # ... and the two rows differ: the test would not pass if they shared them.
    assert rows_of(first, "test-mine")["resnet32"] != rows_of(second, "test-mine")["resnet32"]
    # The remedies' rows read the same budgets as dtr's (its grid and window).
    dtr = rows_of(first, "dtr")["resnet32"]
    for name in REMEDY_POLICIES:
        assert rows_of(first, name)["resnet32"].budgets == dtr.budgets == by_hand(program, "dtr")["budgets"]
    html = (out / "report.html").read_text()
    assert 'id="leaderboard"' in html and "test-mine" in html and "compute / size" in html
    assert "leaderboard" in second.figures and (out / "figures" / "leaderboard.png").stat().st_size > 10_000


TINY = str(dtrlab.__file__).removesuffix("__init__.py") + "data/examples/tiny.jsonl"


@pytest.mark.slow
def test_reproduce_takes_a_formula_and_a_policy_file_and_refuses_a_bad_one_in_one_line(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(f'[policies.cheap]\nscore = "{CHEAP}"\n')
    res = cli_invoke("reproduce", TINY, "--quick", "-j", "1", "--out", str(tmp_path / "r"),
                     "-p", STALE2, "--policies", str(path))
    assert res.exit_code == 0, res.output
    summary = (tmp_path / "r" / "summary.md").read_text()
    table = summary.split("## Leaderboard of the policies")[1].split("\n## ")[0]
    listed = [line.split(" | ")[0].strip("| ") for line in table.splitlines() if line.startswith("| ")][1:]
    assert sorted(listed) == sorted([*QUICK.policies, *REMEDY_POLICIES, STALE2, "cheap"])
    assert f"`{get_policy(STALE2).text}`" in table
    bad = cli_invoke("reproduce", TINY, "--quick", "--out", str(tmp_path / "bad"),
                     "-p", "score: compute / sise")
    assert bad.exit_code == 2 and "unknown feature 'sise'" in bad.stderr and bad.stderr.count("\n") == 1
    assert not (tmp_path / "bad").exists()
