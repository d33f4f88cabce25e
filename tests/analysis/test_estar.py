"""Incremental e* against a fresh traversal: agree where nothing is evicted, differ on unet."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import needs_shared, public_program
from dtrlab.analysis.estar import neighbourhood_drift
from dtrlab.errors import UsageError
from dtrlab.sim.simulate import budget_from_ratio, simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from helpers import synthetic_program  # noqa: E402


def test_no_pressure_no_drift():
    program = synthetic_program(3, 60)
    drift = neighbourhood_drift(program, budget_from_ratio(program, 2.0))
    assert drift.outcome == "ok" and drift.evaluations == 0 and drift.differing == 0


@pytest.mark.parametrize("seed", range(4))
def test_replay_keeps_the_reference_choices(seed):
    program = synthetic_program(seed, 80)
    budget = budget_from_ratio(program, 0.4)
    drift = neighbourhood_drift(program, budget)
    assert drift.outcome == simulate(program, budget, "dtr").outcome
    assert 0 <= drift.differing <= drift.evaluations
    assert drift.lower + drift.higher <= drift.differing


@needs_shared
def test_unet_has_stale_incremental_neighbourhoods():
    """Found by dtrlab: on unet at 0.3, 156 of 18,128 DTR scores read an incremental e* that a
    fresh traversal would put higher (the upkeep misses storages it should have absorbed)."""
    drift = neighbourhood_drift(public_program("unet"), budget_from_ratio(public_program("unet"), 0.3))
    assert drift.evaluations == 18128 and drift.differing == 156
    assert drift.lower == 156 and drift.higher == 0
    assert drift.first is not None and drift.first.incremental_forward_ns < drift.first.fresh_forward_ns


def test_policies_without_incremental_e_star_are_refused():
    with pytest.raises(UsageError):
        neighbourhood_drift(synthetic_program(1), 10, "dtr-local")


@needs_shared
def test_estar_drift_command():
    from typer.testing import CliRunner

    from conftest import TRACES
    from dtrlab.cli import app

    res = CliRunner().invoke(app, ["estar-drift", str(TRACES), "-t", "resnet32", "-r", "0.1", "--json"])
    assert res.exit_code == 0, res.output
    import json

    out = json.loads(res.output)
    assert out["evaluations"] == 35936 and out["differing"] == 3
