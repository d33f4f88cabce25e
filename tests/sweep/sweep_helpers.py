"""Sweep test helpers: resnet32 specs, the columns a run's result decides, and an in-process oracle.

Self-contained on purpose: `conftest` names a different module depending on collection order.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

import pytest

from dtrlab.sim.simulate import simulate
from dtrlab.sweep.grid import build_specs

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("DTRLAB_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces" / "dtr-iclr21"

# Enforced by tests/conftest.py: a skip on a user's machine, a failure in CI.
needs_shared = pytest.mark.needs_shared

# What the simulation decides: equal across executors, engines and interruptions.
RESULT_COLUMNS = ["key", "trace", "trace_sha256", "policy", "runtime", "ratio", "budget_bytes",
                  "outcome", "overhead", "clock_ns", "remat_ns", "evictions", "eager_evictions",
                  "distinct_evicted", "peak_bytes", "score_evals", "baseline_compute_ns",
                  "baseline_peak_bytes", "overhead_limit", "seed"]


@functools.lru_cache(maxsize=None)
def program(name: str):
    from dtrlab.trace import load

    (p,) = [p for p in load(TRACES, [name], cache=False) if p.name == name]
    return p


def resnet_specs(ratios, policies=("dtr",), runtimes=("eager-optimized",), **kwargs):
    return build_specs(str(TRACES), [program("resnet32")], list(policies), list(runtimes),
                       list(ratios), **kwargs)


def oracle(spec):
    """The run done directly in this process, without any sweep machinery."""
    return simulate(program(spec.trace), spec.budget_bytes, spec.policy, spec.runtime,
                    overhead_limit=spec.overhead_limit, seed=spec.seed)


def result_rows(frame):
    """A store's rows as comparable dicts in key order (NaN made None so that rows compare)."""
    rows = frame.sort_values("key")[RESULT_COLUMNS].astype(object)
    return rows.where(rows.notna(), None).to_dict("records")


# --- a run that cannot end before its timeout -------------------------------------------------------

HOLD = "DTRLAB_TEST_HOLD_SCORES"  # set in the environment: held_dtr never returns
HELD_DTR = "sweep_helpers:held_dtr"  # its import path: a worker process imports it (tests/sweep on PYTHONPATH)
HERE = Path(__file__).resolve().parent


def held_dtr(f):
    """DTR's score, which blocks for good while HOLD is set: a run that no timeout can outlast, however
    fast the machine. A worker reads HOLD from the environment it was started with."""
    if os.environ.get(HOLD):
        threading.Event().wait()
    den = f.size_bytes * f.staleness_ns
    return (f.compute_ns + f.neighborhood_ns) / den if den > 0 else float("inf")


held_dtr.needs = ("regions",)  # formula.NEIGHBORHOOD: e*, kept by the optimized runtimes
