"""The switch figure's data (compare --plot): each run's series are its counters (evictions,
recompute time, memory within the budget), the faster run first, and the marker is diverge's."""

from __future__ import annotations


from dtrlab.analysis.divergence import diverge
from dtrlab.analysis.scan import parse_budget
from dtrlab.sim.simulate import simulate
from dtrlab.timeline.switchplot import switch_runs
from dtrlab.trace import load_one

from conftest import TRACES, cli_invoke, needs_compiled, needs_shared

pytestmark = [needs_shared, needs_compiled]


def test_series_are_the_runs_counters_and_the_marker_is_diverges():
    program = load_one(str(TRACES), "resnet32")
    a, b = parse_budget(program, "0.111"), parse_budget(program, "0.110")
    fast, slow, found = switch_runs(program, a, b, "dtr", "eager-optimized")
    results = {x.budget_bytes: simulate(program, x.budget_bytes, "dtr", "eager-optimized") for x in (a, b)}
    assert results[fast.budget_bytes].remat_ns <= results[slow.budget_bytes].remat_ns
    for s in (fast, slow):
        r = results[s.budget_bytes]
        assert len(s.evictions) == r.evictions + r.eager_evictions
        assert (s.recompute[-1, 1] if len(s.recompute) else 0) == r.remat_ns
        assert s.memory[:, 1].max() <= s.budget_bytes
    fa = a if a.budget_bytes == fast.budget_bytes else b
    sb = b if fa is a else a
    assert found.index is not None
    assert found.to_dict() == diverge(program, fa, sb, "dtr", "eager-optimized").to_dict()


def test_compare_plot_writes_a_png(tmp_path):
    out = tmp_path / "switch.png"
    done = cli_invoke("compare", TRACES, "-t", "resnet32", "--between", "0.110", "0.111", "--plot", out, "--json")
    assert done.exit_code == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"figure: {out}" in done.stderr
