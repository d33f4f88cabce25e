"""A long run is never silent: both engines call progress at the same points, a callback that
raises (Ctrl-C) ends the run with its figures so far, and the watch says what it should when."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import cli_invoke, needs_compiled
from dtrlab.sim import progress as pg
from dtrlab.sim.progress import RunInterrupted, RunWatch, Snapshot
from dtrlab.sim.runtimes import RUNTIMES
from dtrlab.sim.simulate import budget_from_ratio, simulate
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import format_trace
from helpers import compatible_cases, synthetic_program

CASES = [c for c in compatible_cases() if not RUNTIMES[c[1]].banishing]


def calls_of(program, budget, policy, runtime, engine, every, stop_at=None):
    calls = []

    def progress(*figures):
        calls.append(figures)
        if len(calls) == stop_at:
            raise KeyboardInterrupt

    try:
        result = simulate(program, budget, policy, runtime, engine=engine, progress=progress, progress_every=every)
    except RunInterrupted as exc:
        assert isinstance(exc.__cause__, KeyboardInterrupt)
        result = exc.partial
    return calls, result


@needs_compiled
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.sampled_from(CASES), st.floats(0.05, 1.2), st.integers(1, 40))
def test_both_engines_call_progress_with_the_same_figures_at_the_same_points(seed, case, ratio, every):
    program = synthetic_program(seed)
    budget = budget_from_ratio(program, ratio)
    plain = simulate(program, budget, *case)
    c_calls, c = calls_of(program, budget, *case, "c", every)
    py_calls, py = calls_of(program, budget, *case, "python", every)
    assert c_calls == py_calls
    assert len(c_calls) >= len(program.step_kind) // every or c.outcome != "ok"  # a call at least every step
    assert c == plain and py.to_dict() == dict(plain.to_dict(), engine="python")  # watching changes nothing
    # a callback that raises ends both runs at the same call, with the same figures so far
    if len(c_calls) >= 2:
        stop = len(c_calls) // 2 + 1
        c_part = calls_of(program, budget, *case, "c", every, stop)[1].to_dict()
        py_part = calls_of(program, budget, *case, "python", every, stop)[1].to_dict()
        assert (c_part.pop("engine"), py_part.pop("engine")) == ("c", "python")
        assert c_part == py_part and c_part["outcome"] == "interrupted"
        assert c_part["clock_ns"] == c_calls[stop - 1][0] <= plain.clock_ns


def test_the_watch_is_silent_for_two_seconds_then_reports():
    lines, now = [], [100.0]
    watch = RunWatch(lines.append, 1000, now=lambda: now[0])
    for t, clock in ((100.5, 10), (101.9, 20)):
        now[0] = t
        watch(clock, 0, 0, 0, 5, 5)
    assert lines == []
    now[0] = 102.1
    watch(4_000_000, 1_000_000, 7, 3, 40, 60)
    assert lines == ["2 s: clock 4.0 ms, 7 evictions, overhead 1.33x so far, operator 40 of 1,000"]
    now[0] = 103.0  # within the next two seconds: nothing
    watch(5_000_000, 1_000_000, 8, 3, 41, 61)
    assert len(lines) == 1


def test_a_thrash_is_said_once_while_climbing_and_names_the_overhead_limit():
    said, warned, now = [], [], [0.0]
    watch = RunWatch(said.append, 10, warn=warned.append, now=lambda: now[0])
    watch(150_000, 149_000, 10, 0, 3, 3)  # 150x, but no earlier figure: not yet climbing
    watch(140_000, 138_800, 20, 0, 3, 3)  # 117x: past 100x and falling
    assert warned == []
    watch(300_000, 299_000, 30, 0, 3, 3)  # 300x, climbing
    watch(900_000, 899_000, 40, 0, 3, 3)
    assert len(warned) == 1 and "thrashing: overhead 300x so far and climbing" in warned[0]
    assert "--overhead-limit" in warned[0] and said == []  # within the silent seconds: no progress line
    limited = []
    RunWatch(said.append, 10, warn=limited.append, now=lambda: 0.0, overhead_limit=500)(
        *Snapshot(150_000, 149_000, 1, 0, 1, 1).__dict__.values())
    assert limited == []


@pytest.mark.slow
def test_ctrl_c_in_the_cli_prints_the_figures_so_far_and_exit_130(tmp_path, monkeypatch):
    path = tmp_path / "long.jsonl"
    path.write_text(format_trace(synthetic_trace(7, 3000)))
    calls = []

    def interrupt(self, *figures):
        calls.append(figures)
        raise KeyboardInterrupt

    monkeypatch.setattr(pg.RunWatch, "__call__", interrupt)
    res = cli_invoke("simulate", str(path), "--ratio", "0.5", "--json", "--no-cache")
    assert res.exit_code == 130 and res.stdout == ""
    (line,) = res.stderr.splitlines()
    clock_ms = f"{calls[0][0] / 1e6:,.1f} ms"
    assert line.startswith("dtrlab: interrupted") and clock_ms in line and "partial run" in line
    monkeypatch.undo()
    done = json.loads(cli_invoke("simulate", str(path), "--ratio", "0.5", "--json",
                                 "--no-cache").stdout)
    assert done["clock_ns"] > calls[0][0]
