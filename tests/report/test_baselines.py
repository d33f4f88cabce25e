"""The report's optimal baselines: DTR, its envelope, the best schedule found and the lower bound, from
the solver rows a store holds; the study's windows; and `reproduce --optimal` end to end on a small trace
(the four curves in the figure, the table equal to the store's rows, a rerun that solves nothing)."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from dtrlab.analysis.runs import Run
from dtrlab.optimal.defaults import OPTIMAL_POLICY, SolveSettings
from dtrlab.report import plots
from dtrlab.report.baselines import baselines, dtr_specs, optimal_ratios, optimal_specs, trace_baselines
from dtrlab.report.pipeline import STORE_NAME, reproduce
from dtrlab.report.plan import QUICK
from dtrlab.report.study import STUDY_TRACES
from dtrlab.sweep.grid import parse_ratios
from dtrlab.sweep.store import Store
from dtrlab.trace import load

TINY = Path(__file__).resolve().parents[2] / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"


def _solver_row(sha, budget, ratio, overhead, bound, status, key):
    return {"key": key, "trace_sha256": sha, "policy": OPTIMAL_POLICY, "budget_bytes": budget, "ratio": ratio,
            "outcome": "ok" if overhead is not None else "oom", "overhead": overhead, "bound_overhead": bound,
            "solver_status": status}


def test_each_budget_takes_the_least_best_up_to_it_and_the_largest_bound_from_it_on():
    dtr = [Run(0.1, 100, "ok", 3.0), Run(0.2, 200, "oom", None), Run(0.3, 300, "ok", 4.0), Run(0.5, 500, "ok", 1.5)]
    rows = pd.DataFrame([
        _solver_row("s", 200, 0.2, 2.5, 1.2, "feasible", "a"),  # two settings at one budget
        _solver_row("s", 200, 0.2, 2.2, 1.1, "feasible", "b"),
        _solver_row("s", 300, 0.3, None, 1.4, "unknown", "c"),  # none found: the bound alone
        _solver_row("s", 400, 0.4, 1.3, 1.3, "optimal", "d"),  # a budget DTR did not run
    ])
    points = {p.budget_bytes: p for p in trace_baselines("t", dtr, rows).points}
    assert sorted(points) == [100, 200, 300, 400, 500]
    p = points[200]
    # its own rows' bound is 1.2, but 300's bound (1.4) holds here too: what fits 200 fits 300
    assert (p.dtr_outcome, p.dtr, p.envelope, p.best, p.bound, p.status, p.solves) == ("oom", None, 3.0, 2.2, 1.4,
                                                                                        "feasible", 2)
    assert p.gap == pytest.approx((2.2 - 1.4) / 2.2)
    p = points[300]  # no schedule of its own, but 200's fits
    assert (p.dtr, p.envelope, p.best, p.bound, p.status) == (4.0, 3.0, 2.2, 1.4, "unknown")
    assert p.gap == pytest.approx((2.2 - 1.4) / 2.2)
    p = points[400]  # the envelope at a budget DTR did not run: its runs below it
    assert (p.dtr_outcome, p.envelope, p.best, p.gap) == (None, 3.0, 1.3, 0.0)
    assert (points[100].solves, points[500].envelope) == (0, 1.5)


def test_the_windows_hold_the_study_traces_points_inside_them_and_say_which_traces_have_none():
    sha = STUDY_TRACES["resnet32"]
    ratios = [0.09, 0.095, 0.1, 0.101, 0.102, 0.115, 0.12]
    dtr = [{"key": f"d{r}", "trace_sha256": sha, "policy": "dtr", "runtime": "eager-optimized", "overhead_limit": 20.0,
            "seed": 0, "ratio": r, "budget_bytes": int(r * 10_000), "outcome": "oom" if r == 0.102 else "ok",
            "overhead": None if r == 0.102 else 2.0 + r, "evictions": 0, "distinct_evicted": 0} for r in ratios]
    other = [{**dtr[0], "key": "x", "overhead_limit": 3.0, "overhead": 1.01},  # another cap: not the report's DTR
             {**dtr[0], "key": "y", "runtime": "optimized", "overhead": 1.01}]
    stored = pd.DataFrame([_solver_row(sha, 1000, 0.1, 2.05, 1.2, "feasible", "k"), *dtr, *other,
                           {**_solver_row("other", 10, 0.5, 1.0, 1.0, "optimal", "j"), "policy": "lru"}])
    traces = ({"name": "resnet32", "sha256": sha}, {"name": "unet", "sha256": "u"})
    section = baselines(traces, stored, 20.0, 0)
    assert [t.trace for t in section.traces] == ["resnet32"] and section.unsolved == ("unet",)
    (window,) = section.windows
    assert (window.trace, window.pathology, window.lo, window.hi) == ("resnet32", "feasibility inversion", 0.095, 0.115)
    assert [p.ratio for p in window.points] == [0.095, 0.1, 0.101, 0.102, 0.115]
    inverted = window.points[3]
    assert inverted.dtr_outcome == "oom" and inverted.envelope == pytest.approx(2.09)  # the run at 0.09
    assert window.points[1].best == 2.05 and window.points[1].bound == 1.2
    assert window.reading == ("DTR fails at 1 budget(s) where its own schedule at a smaller budget fits (its envelope "
                              "there: 2.0900x at best); DTR's run is up to 1.01x its envelope (at 0.115); the best "
                              "schedule found is 2.0500x-2.0500x; no schedule beats 1.2000x-1.2000x (the bounds).")


def test_reproduce_solves_the_coarse_grid_and_the_window_exactly_or_the_bound_alone_past_the_size():
    plan = replace(QUICK, coarse_ratios="0.5:1.0:0.25")
    assert optimal_ratios(plan, SimpleNamespace(sha256="x")) == (0.5, 0.75, 1.0)
    window = optimal_ratios(plan, SimpleNamespace(sha256=STUDY_TRACES["resnet32"]))
    assert set(parse_ratios("0.095:0.115:0.005")) <= set(window) and {0.5, 0.75, 1.0} <= set(window)
    (tiny,) = load(str(TINY), cache=False)
    settings = SolveSettings(time_limit_s=3)
    exact = optimal_specs(str(TINY), [tiny], plan, settings)
    assert len(exact) == 3 and all(s.solve == settings for s in exact)
    small = optimal_specs(str(TINY), [tiny], replace(plan, optimal_max_operators=tiny.n_ops - 1), settings)
    assert all(s.solve == replace(settings, bound_only=True) for s in small) and len(small) == 3
    beside = dtr_specs(str(TINY), [tiny], plan, overhead_limit=20.0)  # DTR at the same budgets
    assert sorted(s.budget_bytes for s in beside) == sorted(s.budget_bytes for s in exact)
    assert {s.policy for s in beside} == {"dtr"}


def test_the_figure_draws_the_four_curves_with_the_points_values():
    points = trace_baselines("t", [Run(0.1, 100, "oom", None), Run(0.2, 200, "ok", 3.0), Run(0.3, 300, "ok", 4.0)],
                             pd.DataFrame([_solver_row("s", 200, 0.2, 2.0, 1.5, "feasible", "a"),
                                           _solver_row("s", 300, 0.3, 1.8, 1.6, "feasible", "b"),
                                           _solver_row("s", 100, 0.1, None, math.inf, "infeasible", "c")])).points
    fig = plots.optimal_baselines("t", points)
    lines = {line.get_gid(): line for line in fig.axes[0].get_lines()}
    assert set(plots.BASELINE_CURVES) <= set(lines)
    assert list(lines["dtr"].get_ydata()) == [3.0, 4.0]
    assert list(lines["dtr-envelope"].get_ydata()) == [3.0, 3.0]
    assert list(lines["best-found"].get_ydata()) == [2.0, 1.8]
    assert list(lines["lower-bound"].get_xdata()) == [0.2, 0.3]  # no finite bound where none fits
    assert list(lines["dtr-failed"].get_xdata()) == [0.1]
    plots.plt.close(fig)


def _table(html: str, trace: str) -> list[list[str]]:
    part = html.split(f"<summary>{trace}: the ", 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in part.split("<tr>")[2:]]


@pytest.mark.slow
def test_reproduce_optimal_draws_the_four_curves_from_the_store_and_a_rerun_solves_nothing(tmp_path):
    plan = replace(QUICK, policies=("dtr",), coarse_ratios="0.5:1.0:0.1", live=False)
    settings = SolveSettings(time_limit_s=3)
    out = tmp_path / "report"
    first = reproduce(str(TINY), out, plan=plan, workers=2, progress=False, optimal=settings)
    assert first.new_solves == 6
    svg = (out / "figures" / "optimal-tiny.svg").read_text()
    for gid in plots.BASELINE_CURVES:
        assert f'id="{gid}"' in svg
    html = (out / "report.html").read_text()
    assert 'alt="tiny: overhead against budget of DTR, DTR&#39;s envelope' in html
    with Store(out / STORE_NAME, read_only=True) as store:
        rows = store.rows()
    solver = rows[rows["policy"] == OPTIMAL_POLICY].set_index("budget_bytes")
    dtr = rows[rows["policy"] == "dtr"]
    table = _table(html, "tiny")
    assert len(table) == len(solver) == 6
    for cells in table:
        budget = int(cells[1].replace(",", ""))
        row = solver.loc[budget]
        assert row["time_limit_s"] == 3.0
        assert row["outcome"] != "ok" or row["bound_overhead"] <= row["overhead"] + 1e-12
        # by hand: the least schedule found at this budget or below, the largest bound here or above
        found = solver[(solver.index <= budget) & (solver["outcome"] == "ok")]["overhead"]
        bound = solver[solver.index >= budget]["bound_overhead"].max()
        assert cells[4] == (f"{found.min():.4f}" if len(found) else "-")
        assert cells[5] == ("none fits" if bound == math.inf else f"{bound:.4f}")
        assert len(found) == 0 or bound <= found.min() + 1e-12
        below = dtr[(dtr["budget_bytes"] <= budget) & (dtr["outcome"] == "ok")]["overhead"]  # the envelope, by hand
        assert cells[3] == (f"{below.min():.4f}" if len(below) else "-")
    again = reproduce(str(TINY), out, plan=plan, workers=2, progress=False, optimal=settings)
    assert (again.new_runs, again.new_solves) == (0, 0)
    assert (out / "report.html").read_text() == html
    # without --optimal a new folder has no solver rows: one line says so and how to get them
    bare = tmp_path / "bare"
    reproduce(str(TINY), bare, plan=plan, workers=2, progress=False)
    text = (bare / "report.html").read_text()
    assert 'class="optimal-none"' in text and "dtrlab reproduce --optimal --time-limit S" in text
    assert not (bare / "figures" / "optimal-tiny.png").exists()
