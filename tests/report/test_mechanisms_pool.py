"""report.mechanisms on worker processes: the first divergences prefetched on two processes are those
the section computes in its own process, and once they are in the memo the section replays nothing."""

from __future__ import annotations

import pytest

from conftest import TRACES, needs_compiled, needs_shared, public_program
from dtrlab.report import mechanisms
from dtrlab.report.findings import curves
from dtrlab.report.plan import FULL, RUNTIME, SUBJECT_POLICY, SWITCH_FACTOR
from dtrlab.report.runfacts import keeping
from dtrlab.sweep.grid import build_specs
from dtrlab.sweep.run import run_sweep
from dtrlab.sweep.store import Store

pytestmark = [needs_shared, needs_compiled]


@pytest.mark.slow
def test_divergences_from_workers_are_the_sections_own(tmp_path, monkeypatch):
    program = public_program("resnet32")
    # the study's inversion (0.101 | 0.102-0.106 | 0.107) and the curve's switches on coarse ratios
    ratios = [round(0.1 + 0.001 * i, 3) for i in range(9)] + [0.2, 0.3, 0.4, 0.5, 0.7]
    by_name = {program.name: program}
    found = {}
    for folder in ("pool", "serial"):
        out = tmp_path / folder
        out.mkdir()
        specs = keeping(build_specs(str(TRACES), [program], [SUBJECT_POLICY], [RUNTIME], ratios,
                                    overhead_limit=FULL.overhead_limit), out)
        with Store(out / "runs.duckdb") as store:
            run_sweep(specs, store, workers=2, progress=False)
            found[folder] = curves(store.rows(), SWITCH_FACTOR)
    pairs = mechanisms.pair_count(found["pool"])
    assert pairs >= 1 and pairs == mechanisms.pair_count(found["serial"])
    assert mechanisms.prefetch_divergences(tmp_path / "pool", found["pool"], by_name, FULL, workers=2) == pairs
    serial = mechanisms.mechanisms_of(tmp_path / "serial", found["serial"], by_name, (), FULL)

    def diverge_again(*args, **kwargs):
        raise AssertionError("replayed again")
    monkeypatch.setattr(mechanisms, "diverge", diverge_again)
    assert mechanisms.prefetch_divergences(tmp_path / "pool", found["pool"], by_name, FULL, workers=2) == 0
    pooled = mechanisms.mechanisms_of(tmp_path / "pool", found["pool"], by_name, (), FULL)
    assert pooled == serial
    assert any(s.divergence_index is not None and s.flipped_by is not None for s in pooled)
