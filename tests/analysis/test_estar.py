"""Incremental e* against a fresh traversal: agree where nothing is evicted, differ on unet."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import cli_invoke, golden, needs_shared, public_program
from dtrlab.analysis.estar import neighborhood_drift
from dtrlab.errors import UsageError
from dtrlab.sim.simulate import budget_from_ratio, simulate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from helpers import synthetic_program  # noqa: E402


def test_no_pressure_no_drift():
    program = synthetic_program(3, 60)
    drift = neighborhood_drift(program, budget_from_ratio(program, 2.0))
    assert drift.outcome == "ok" and drift.evaluations == 0 and drift.differing == 0


@pytest.mark.parametrize("policy", ["dtr", "msps", "ab-e-size"])
@pytest.mark.parametrize("seed", range(4))
def test_replay_keeps_the_reference_choices(seed, policy):
    """The probe's traversals only watch: the run is the one `simulate` gives (on the compiled engine
    where it is built), and every score it evaluates is counted."""
    program = synthetic_program(seed, 80)
    budget = budget_from_ratio(program, 0.4)
    drift = neighborhood_drift(program, budget, policy)
    run = simulate(program, budget, policy)
    assert (drift.outcome, drift.clock_ns, drift.evictions, drift.evaluations) == \
           (run.outcome, run.clock_ns, run.evictions, run.score_evals)
    assert run.evictions > 0
    assert 0 <= drift.differing <= drift.evaluations
    assert drift.lower + drift.higher <= drift.differing


@needs_shared
def test_unet_has_stale_incremental_neighbourhoods():
    """On unet at 0.3 some DTR scores read an incremental e* that a fresh traversal puts higher (the
    upkeep misses storages it should have absorbed); the counts are pinned in goldens.json."""
    program = public_program("unet")
    budget = budget_from_ratio(program, 0.3)
    drift = neighborhood_drift(program, budget)
    assert drift.evaluations == simulate(program, budget, "dtr").score_evals
    pinned = golden("estar_drift_unet_0.3_dtr")
    assert (drift.evaluations, drift.differing, drift.lower, drift.higher) == \
           (pinned["evaluations"], pinned["differing"], pinned["lower"], pinned["higher"])
    assert drift.first is not None and drift.first.incremental_forward_ns < drift.first.fresh_forward_ns


def test_policies_without_incremental_e_star_are_refused():
    with pytest.raises(UsageError):
        neighborhood_drift(synthetic_program(1), 10, "dtr-local")


@pytest.mark.slow
@needs_shared
def test_estar_drift_command():
    from conftest import TRACES

    res = cli_invoke("estar-drift", str(TRACES), "-t", "resnet32", "-r", "0.1", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    program = public_program("resnet32")
    run = simulate(program, budget_from_ratio(program, 0.1), "dtr")
    assert (out["evaluations"], out["clock_ns"], out["evictions"]) == (run.score_evals, run.clock_ns, run.evictions)
    assert out["differing"] == golden("estar_drift_resnet32_0.1_dtr")["differing"]
