"""One refinement loop: `dtrlab sweep --refine` stores what rounds of refine_specs + run_sweep, written
out here by hand, store; `dtrlab reproduce` runs the same loop down to the fine grid, and a report names
no switch or inversion across budgets it did not run (report.refine)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import dtrlab
from dtrlab.analysis.regimes import switches
from dtrlab.report.claims import REPRODUCED
from dtrlab.report.pipeline import STORE_NAME, reproduce
from dtrlab.report.plan import (CLAIMS, COARSE_RATIOS, FINE_STEP, FULL, REPORT_OVERHEAD_LIMIT, REFINE_POINTS, RUNTIME,
                                SUBJECT_POLICY, SWITCH_FACTOR, fine_neighbours)
from dtrlab.report.study import STUDY_TRACES
from dtrlab.sweep.grid import build_specs, parse_ratios, ratio_literal
from dtrlab.sweep.run import refine_specs, run_sweep
from dtrlab.sweep.store import Store
from dtrlab.trace import load

from conftest import TRACES, cli_invoke, golden, needs_compiled, needs_shared

TINY = Path(dtrlab.__file__).parent / "data" / "examples" / "tiny.jsonl"
ROUNDS = 2


def _stored(path: Path) -> dict[str, tuple]:
    with Store(path, read_only=True) as store:
        frame = store.rows()
    # a run that did not finish has no overhead (NaN in the frame, and NaN != NaN): None here
    return {r.key: (r.ratio, r.budget_bytes, r.outcome, None if r.overhead != r.overhead else r.overhead, r.evictions)
            for r in frame.itertuples()}


def _by_hand(path: Path) -> dict[str, tuple]:
    """The loop as it was written before it became one function: round after round until nothing is new."""
    programs = load(str(TINY), cache=False)
    specs = build_specs(str(TINY), programs, ["dtr"], [RUNTIME], parse_ratios(COARSE_RATIOS),
                        overhead_limit=REPORT_OVERHEAD_LIMIT, seed=FULL.seed)
    with Store(path) as store:
        run_sweep(specs, store, workers=1, progress=False)
        for _ in range(ROUNDS):
            new = refine_specs(specs, store, {p.sha256: p for p in programs}, REFINE_POINTS, SWITCH_FACTOR)
            if not new:
                break
            run_sweep(new, store, workers=1, progress=False)
            specs = specs + new
    return _stored(path)


def check_refined(runs) -> None:
    """What a report may say of a curve: two neighbours that differ (outcome, or overhead by more than
    the switch factor) are neighbouring fine budgets, and every fine budget inside an inversion was run."""
    runs = sorted((r for r in runs if r.ratio is not None), key=lambda r: r.ratio)
    for a, b in zip(runs, runs[1:]):
        differ = a.outcome != b.outcome or bool(a.feasible and b.feasible and switches([a, b], SWITCH_FACTOR))
        assert not differ or fine_neighbours(a.ratio, b.ratio), (a.ratio, a.outcome, a.overhead, b.ratio, b.outcome,
                                                                 b.overhead)
    seen = {ratio_literal(r.ratio) for r in runs}
    feasible = [r.ratio for r in runs if r.feasible]
    for r in runs:
        if r.infeasible and feasible and min(feasible) < r.ratio < max(feasible):  # inside an inversion
            for side in (ratio_literal(r.ratio) - FINE_STEP, ratio_literal(r.ratio) + FINE_STEP):
                assert side in seen, (r.ratio, side)


@pytest.mark.slow
def test_sweep_refine_and_reproduce_share_one_loop(tmp_path):
    expected = _by_hand(tmp_path / "hand.duckdb")
    coarse = len(parse_ratios(COARSE_RATIOS))
    assert len(expected) > coarse, "tiny's dtr curve must call for refinement, or this test proves nothing"

    proc = cli_invoke("sweep", TINY, "--ratios", COARSE_RATIOS, "--policy", "dtr", "--overhead-limit", REPORT_OVERHEAD_LIMIT,
                      "--refine", REFINE_POINTS, "--refine-factor", SWITCH_FACTOR, "--refine-rounds", ROUNDS,
                      "--store", tmp_path / "cli.duckdb", "--workers", "1", "--no-progress")
    assert proc.exit_code == 0, proc.stderr[-2000:]
    assert _stored(tmp_path / "cli.duckdb") == expected
    assert "refinement round 1:" in proc.stderr

    plan = replace(FULL, policies=("dtr",), windows={}, live=False)
    repro = reproduce(str(TINY), tmp_path / "report", plan=plan, workers=1, progress=False)
    stored = _stored(tmp_path / "report" / STORE_NAME)
    # The report adds ablation runs (ab-* policies) after the scans; its dtr curve holds the sweep's runs
    # (the same rounds of refine_specs) and goes on down to the fine grid.
    with Store(tmp_path / "report" / STORE_NAME, read_only=True) as store:
        dtr = set(store.rows().query("policy == 'dtr'")["key"])
    assert set(expected) <= dtr and all(stored[k] == expected[k] for k in expected)
    check_refined(repro.curves[("tiny", SUBJECT_POLICY)].runs)


@pytest.mark.slow
@needs_shared
@needs_compiled
def test_an_inversion_across_unrun_budgets_is_scanned_before_it_is_reported(tmp_path):
    # Three budgets of the public ResNet-32: feasible, out of memory, feasible. The report must not
    # name the inversion 0.101 / 0.104 / 0.108: it runs every fine budget inside it and finds the
    # study's (tests/goldens.json), which then reproduces claim (b1).
    want = golden("study_resnet32_inversion")
    resnet = STUDY_TRACES["resnet32"]
    plan = replace(CLAIMS, traces=(resnet,), windows={resnet: "0.101,0.104,0.108"})
    repro = reproduce(str(TRACES), tmp_path / "report", plan=plan, workers=2, progress=False)
    curve = repro.curves[("resnet32", SUBJECT_POLICY)]
    check_refined(curve.runs)
    (inv,) = curve.inversions
    assert inv.last_feasible.ratio == want["last_feasible_ratio"]
    assert [r.ratio for r in inv.infeasible] == want["infeasible_ratios"]
    assert inv.next_feasible.ratio == want["next_feasible_ratio"]
    assert {c.key: c.verdict for c in repro.claims}["b1"] == REPRODUCED
    # Only the runs it needed: the three given and the five inside the inversion's stretch left to scan.
    assert sorted(r.ratio for r in curve.runs) == [0.101, 0.102, 0.103, 0.104, 0.105, 0.106, 0.107, 0.108]
