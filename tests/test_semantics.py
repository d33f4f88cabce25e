"""The semantics version is bumped whenever results change: a fingerprint of lowering, engine and
analysis results on the shipped traces is pinned with the version it belongs to (tests/goldens.json).

A stored row or memo is keyed by SEMANTICS_VERSION; if code changed what they hold without a bump, old
rows would be served as current. This test is what makes "without a bump" impossible to miss."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import golden
from dtrlab.analysis.churn import compare_runs
from dtrlab.analysis.divergence import diverge
from dtrlab.analysis.feasibility import inversions
from dtrlab.analysis.oom import explain_oom
from dtrlab.analysis.regimes import switches
from dtrlab.analysis.scan import Budget, scan
from dtrlab.semantics import SEMANTICS_VERSION
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate
from dtrlab.sweep.grid import parse_ratios
from dtrlab.trace import load, shipped_traces

POLICIES = ("dtr", "dtr-eq", "dtr-local", "dtr-unopt", "dtr-fresh", "msps", "lru", "size", "random",
            "ab-e-size", "ab-eq-stale", "ab-none-stale")
OTHER_RUNTIMES = (("optimized", "dtr"), ("eager", "dtr-local"), ("lazy", "lru"), ("banishing", "size"))
RATIOS = (0.15, 0.25, 0.4, 0.6, 0.9)
SCAN = "0.10:1.00:0.01"


# The shipped captures that simulate in milliseconds at every ratio, policy and runtime (the LSTM and
# DenseNet take seconds at some), and the tiny example.
TRACES = ["resnet32", "transformer", "unet"]
# The LSTM's analyses alone, on its switch window: the captures shipped since 2026-12-03 (one
# thread) have no switch elsewhere, and a switch is what the churn and divergence analyses need.
SWITCH_WINDOW = ("lstm", "0.83:0.85:0.01")


def _programs():
    tiny = Path(shipped_traces()).parent / "examples" / "tiny.jsonl"
    return load(shipped_traces(), TRACES, cache=False) + load(tiny, cache=False)


def _lowering(program) -> dict:
    h = hashlib.sha256()
    for name, array in sorted(program.arrays().items()):
        h.update(f"{name}:{array.dtype.str}:{array.shape}".encode())
        h.update(np.ascontiguousarray(array).tobytes())
    h.update(json.dumps([list(program.op_names), list(program.tensor_names)]).encode())
    base = baseline(program)
    return {"arrays": h.hexdigest(), "peak_bytes": base.peak_bytes, "compute_ns": base.compute_ns}


def _run(program, ratio, policy, runtime="eager-optimized") -> dict:
    d = simulate(program, budget_from_ratio(program, ratio), policy, runtime).to_dict()
    d.pop("engine")
    return d


def _analyses(program, grid: str = SCAN) -> dict:
    runs = scan(program, parse_ratios(grid))
    sw, inv = switches(runs), inversions(runs)
    out = {"runs": [(r.ratio, r.outcome, r.overhead) for r in runs],
           "switches": [s.to_dict() for s in sw], "inversions": [i.to_dict() for i in inv]}
    oom = next((r for r in runs if r.outcome == "oom"), None)
    if oom is not None:
        out["oom"] = explain_oom(program, oom.budget_bytes).to_dict()
    if sw:
        big = max(sw, key=lambda s: s.factor)
        a, b = Budget(big.lo.ratio, big.lo.budget_bytes), Budget(big.hi.ratio, big.hi.budget_bytes)
        out["churn"] = compare_runs(program, a, b).to_dict()
        out["divergence"] = diverge(program, a, b).to_dict()
    return out


def fingerprint() -> tuple[str, dict]:
    """A digest of what the current code computes, and the parts it was made of (for a diff)."""
    parts = {}
    for program in _programs():
        runs = [_run(program, r, p) for r in RATIOS for p in POLICIES]
        runs += [_run(program, r, p, rt) for r in RATIOS for rt, p in OTHER_RUNTIMES]
        parts[program.name] = {"lowering": _lowering(program), "runs": runs, "analyses": _analyses(program)}
    name, grid = SWITCH_WINDOW
    (program,) = load(shipped_traces(), [name], cache=False)
    parts[f"{name} {grid}"] = {"lowering": _lowering(program), "analyses": _analyses(program, grid)}
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest(), parts


@pytest.mark.slow
def test_results_change_only_with_a_semantics_bump():
    digest, _ = fingerprint()
    pinned = golden("semantics")
    bump = ("bump SEMANTICS_VERSION in src/dtrlab/semantics.py and write the new version and "
            f"fingerprint {digest} under 'semantics' in tests/goldens.json")
    assert pinned["version"] == SEMANTICS_VERSION, (
        f"SEMANTICS_VERSION is {SEMANTICS_VERSION} but goldens.json pins version {pinned['version']}: {bump}")
    assert digest == pinned["fingerprint"], f"results changed under semantics version {SEMANTICS_VERSION}: {bump}"


@pytest.mark.slow
def test_the_fingerprint_sees_every_kind_of_result():
    """The digest covers engines, runtimes and analyses that do something on these traces: an OOM,
    a switch, recomputation, evictions on every runtime."""
    _, parts = fingerprint()
    analyses = [p["analyses"] for p in parts.values()]
    assert any("oom" in a for a in analyses) and any("divergence" in a for a in analyses)
    runs = [r for p in parts.values() for r in p.get("runs", ())]
    assert {r["runtime"] for r in runs if r["evictions"] > 0} == \
        {"eager-optimized", "optimized", "eager", "lazy", "banishing"}
    assert any(r["remat_ns"] > 0 for r in runs) and any(r["outcome"] == "oom" for r in runs)


if __name__ == "__main__":  # pragma: no cover - prints the figure to pin
    print(fingerprint()[0])
