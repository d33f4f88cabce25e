"""Invariants every run must keep, on hypothesis-generated programs and both engines: the clock's
arithmetic, counts that bound each other, and results that do not depend on names or time units."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import have_compiled
from dtrlab.sim.runtimes import RUNTIMES
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate
from dtrlab.trace.read import Alias, Call, Constant, Copy, CopyFrom, Memory, Mutate, Release
from dtrlab.trace.synth import synthetic_trace
from helpers import compatible_cases, program_of


CASES = compatible_cases()
cases = st.tuples(st.integers(0, 10_000), st.sampled_from(CASES), st.floats(0.05, 1.1), st.integers(0, 3))
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _engines(runtime: str) -> list[str]:
    return ["python", "c"] if not RUNTIMES[runtime].banishing and have_compiled() else ["python"]


def _runs(instructions, budget, policy, runtime, seed):
    program = program_of(instructions)
    return [simulate(program, budget, policy, runtime, seed=seed, engine=e) for e in _engines(runtime)]


def _decided(result) -> dict:
    """What a run decided and counted, leaving out the engine that ran it."""
    d = result.to_dict()
    d.pop("engine")
    return d


@pytest.mark.slow
@SETTINGS
@given(cases)
def test_counts_and_clock_hold_together(case):
    seed, (policy, runtime), ratio, pseed = case
    instructions = synthetic_trace(seed, 40)
    program = program_of(instructions)
    base = baseline(program)
    for r in _runs(instructions, budget_from_ratio(program, ratio), policy, runtime, pseed):
        assert r.evictions >= r.distinct_evicted >= 0
        assert r.peak_bytes <= r.budget_bytes
        if r.outcome == "ok":
            # The reference's clock starts at 1 and advances by every operator run, first or again.
            assert r.clock_ns == 1 + base.compute_ns + r.remat_ns
            assert r.overhead == r.clock_ns / base.compute_ns
        else:
            assert r.clock_ns <= 1 + base.compute_ns + r.remat_ns


def _renamed(instructions):
    """Every tensor under a new name, numbered in an order unrelated to the old names."""
    names: dict[str, str] = {}

    def n(name: str) -> str:
        return names.setdefault(name, f"renamed{len(names) * 7919 % 100_003}_{len(names)}")

    out = []
    for ins in instructions:
        if isinstance(ins, (Constant, Memory, Alias, Release)):
            ins = ins._replace(name=n(ins.name))
        elif isinstance(ins, Call):
            ins = ins._replace(args=tuple(map(n, ins.args)), results=tuple(map(n, ins.results)))
        elif isinstance(ins, Mutate):
            ins = ins._replace(args=tuple(map(n, ins.args)))
        elif isinstance(ins, (Copy, CopyFrom)):
            ins = ins._replace(dst=n(ins.dst), src=n(ins.src))
        out.append(ins)
    return out


def _scaled(instructions, k: int):
    return [ins._replace(time_ns=ins.time_ns * k) if isinstance(ins, (Call, Mutate)) else ins
            for ins in instructions]


@pytest.mark.slow
@SETTINGS
@given(cases)
def test_renaming_every_tensor_changes_nothing(case):
    seed, (policy, runtime), ratio, pseed = case
    instructions = synthetic_trace(seed, 40)
    budget = budget_from_ratio(program_of(instructions), ratio)
    renamed = _renamed(instructions)
    assert renamed != instructions
    for a, b in zip(_runs(instructions, budget, policy, runtime, pseed),
                    _runs(renamed, budget, policy, runtime, pseed)):
        assert _decided(a) == _decided(b)


@pytest.mark.slow
@SETTINGS
@given(cases, st.integers(2, 1000))
def test_scaling_every_time_by_k_scales_every_clock_by_k(case, k):
    """Scores are quotients of times by times (or by sizes), so every decision is the same; only the
    clock's starting 1 is not scaled."""
    seed, (policy, runtime), ratio, pseed = case
    instructions = synthetic_trace(seed, 40)
    budget = budget_from_ratio(program_of(instructions), ratio)
    for a, b in zip(_runs(instructions, budget, policy, runtime, pseed),
                    _runs(_scaled(instructions, k), budget, policy, runtime, pseed)):
        assert (b.outcome, b.evictions, b.eager_evictions, b.distinct_evicted, b.peak_bytes) == \
               (a.outcome, a.evictions, a.eager_evictions, a.distinct_evicted, a.peak_bytes)
        assert b.clock_ns - 1 == k * (a.clock_ns - 1)
        assert b.remat_ns == k * a.remat_ns
        assert b.baseline_compute_ns == k * a.baseline_compute_ns
