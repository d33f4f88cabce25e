"""Benchmarks and probes that cannot rot: each one runs once at its smallest size (`--smoke`), no timing asserted,
so an interface change breaks the build rather than the benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHES = sorted(p.name for pattern in ("bench_*.py", "probe_*.py") for p in (REPO / "benchmarks").glob(pattern))


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCHES)
def test_each_benchmark_runs_at_its_smallest_size(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "DTRLAB_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--smoke"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.strip() and "Traceback" not in done.stderr
