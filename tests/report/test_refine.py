"""One refinement loop: `dtrlab sweep --refine` and `dtrlab reproduce` store the same runs for the same
curve, and both store what rounds of refine_specs + run_sweep, written out here by hand, store."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import dtrlab
from dtrlab.report.pipeline import STORE_NAME, reproduce
from dtrlab.report.plan import COARSE_RATIOS, FULL, OVERHEAD_CAP, REFINE_POINTS, RUNTIME, SEED, SWITCH_FACTOR
from dtrlab.sweep.grid import build_specs, parse_ratios
from dtrlab.sweep.run import refine_specs, run_sweep
from dtrlab.sweep.store import Store
from dtrlab.trace import load

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
                        overhead_limit=OVERHEAD_CAP, seed=SEED)
    with Store(path) as store:
        run_sweep(specs, store, workers=1, progress=False)
        for _ in range(ROUNDS):
            new = refine_specs(specs, store, {p.sha256: p for p in programs}, REFINE_POINTS, SWITCH_FACTOR)
            if not new:
                break
            run_sweep(new, store, workers=1, progress=False)
            specs = specs + new
    return _stored(path)


def test_sweep_refine_and_reproduce_store_the_same_runs(tmp_path):
    expected = _by_hand(tmp_path / "hand.duckdb")
    coarse = len(parse_ratios(COARSE_RATIOS))
    assert len(expected) > coarse, "tiny's dtr curve must call for refinement, or this test proves nothing"

    proc = subprocess.run([sys.executable, "-m", "dtrlab.cli", "sweep", str(TINY), "--ratios", COARSE_RATIOS,
                           "--policy", "dtr", "--overhead-limit", str(OVERHEAD_CAP), "--refine", str(REFINE_POINTS),
                           "--refine-factor", str(SWITCH_FACTOR), "--refine-rounds", str(ROUNDS),
                           "--store", str(tmp_path / "cli.duckdb"), "--workers", "1", "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _stored(tmp_path / "cli.duckdb") == expected
    assert "refinement round 1:" in proc.stderr

    plan = replace(FULL, policies=("dtr",), windows={}, refine_skip=(), refine_rounds=ROUNDS, live=False)
    reproduce(str(TINY), tmp_path / "report", plan=plan, workers=1, progress=False)
    stored = _stored(tmp_path / "report" / STORE_NAME)
    # The report adds ablation runs (ab-* policies) after the scans; its dtr curve is the sweep's.
    with Store(tmp_path / "report" / STORE_NAME, read_only=True) as store:
        dtr = set(store.rows().query("policy == 'dtr'")["key"])
    assert {k: stored[k] for k in dtr} == expected
