"""The shipped captured traces: each reads, lowers and simulates, and matches its manifest (no torch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import dtrlab
from dtrlab.sim.simulate import baseline, simulate
from dtrlab.trace import load

SHIPPED = Path(dtrlab.__file__).parent / "data" / "traces"


def test_shipped_traces_match_their_manifest():
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    total_bytes = sum(p.stat().st_size for p in SHIPPED.iterdir())
    assert total_bytes < 10 * 2**20
    programs = load(SHIPPED, cache=False)
    assert len(programs) == len(manifest["models"]) == 5
    for entry, program in zip(manifest["models"], programs):
        assert baseline(program).peak_bytes == entry["simulated_peak_bytes"]
        assert entry["recorded_peak_bytes"] <= entry["simulated_peak_bytes"]
        assert simulate(program, None).evictions == 0
