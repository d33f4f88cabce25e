"""The memory snapshot, read back with PyTorch's own torch.cuda._memory_viz functions (they run
without a GPU): its accounting holds, its device trace replays to dtrlab's peak_bytes, and the
blocks left are the memory the run ended with (at an OOM, the OOM snapshot's)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtrlab.sim.result import OOM
from dtrlab.sim.simulate import budget_from_ratio
from dtrlab.timeline.memviz import FirstFit, write_memviz
from dtrlab.timeline.source import Window, record

from conftest import needs_shared
from timeline_cases import PUBLIC_RUNS, public_run, replay_device_trace, synthetic_program

memory_viz = pytest.importorskip("torch.cuda._memory_viz", reason="torch is not installed (pip install -e '.[capture]')")


def _read_back(tl, tmp_path):
    path = tmp_path / "run.pickle"
    stats = write_memviz(tl, path)
    with open(path, "rb") as f:
        data = pickle.load(f)
    # PyTorch's readers: segsum raises on any accounting mismatch, trace walks every entry.
    summary = memory_viz.segsum(data)
    assert f"segments: {len(data['segments'])}" in summary
    text = memory_viz.trace(data)
    assert f"{len(data['device_traces'][0])} entries" in text
    return data, stats


def _check(tl, data, stats):
    r = tl.result
    entries = data["device_traces"][0]
    peak, final = replay_device_trace(entries)
    assert peak == stats.peak_bytes == r.peak_bytes
    # The blocks left are the bytes resident at the end (requested bytes; blocks round to 512).
    seg = data["segments"][0]
    assert memory_viz.calc_active(seg) == seg["allocated_size"] >= final
    assert sum(b["requested_size"] for b in seg["blocks"] if b["state"] == "active_allocated") == final
    assert final == int(tl.log.memory_bytes[-1])
    if r.outcome == OOM:
        assert final == tl.oom.memory_bytes
        assert entries[-1]["action"] == "oom" and entries[-1]["size"] == tl.oom.need_bytes
    else:
        assert all(e["action"] != "oom" for e in entries)
    assert sum(e["action"] == "alloc" for e in entries) == stats.allocs


@needs_shared
@pytest.mark.parametrize("name,ratio", PUBLIC_RUNS)
def test_pytorchs_reader_sees_dtrlabs_peak_and_final_memory(tmp_path, name, ratio):
    tl = public_run(name, ratio)
    data, stats = _read_back(tl, tmp_path)
    _check(tl, data, stats)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.floats(0.2, 1.1))
def test_generated_programs_replay_to_the_engines_peak(tmp_path, seed, ratio):
    program = synthetic_program(seed)
    tl = record(program, budget_from_ratio(program, ratio), ratio=ratio)
    data, stats = _read_back(tl, tmp_path)
    _check(tl, data, stats)


@needs_shared
def test_a_window_starts_with_what_was_resident(tmp_path):
    tl = public_run("resnet32", 0.2)
    clock = tl.log.clock_ns
    window = Window(int(clock[len(clock) // 2]), int(clock[3 * len(clock) // 4]))
    data, stats = _read_back(tl.cut(window), tmp_path)
    entries = data["device_traces"][0]
    assert entries and all(window.start_ns // 1000 <= e["time_us"] <= window.end_ns // 1000 for e in entries)
    # The snapshot's blocks are the bytes resident at the window's last row.
    last = int(((clock >= window.start_ns) & (clock <= window.end_ns)).nonzero()[0][-1])
    seg = data["segments"][0]
    assert sum(b["requested_size"] for b in seg["blocks"] if b["state"] == "active_allocated") == tl.log.memory_bytes[last]
    # Its peak counts the bytes resident when it starts: at least the window's highest row, at most the run's peak.
    inside = tl.log.memory_bytes[(clock >= window.start_ns) & (clock <= window.end_ns)]
    assert int(inside.max()) <= stats.peak_bytes <= tl.result.peak_bytes


def test_first_fit_takes_the_lowest_gap_that_fits_and_merges_frees():
    fit = FirstFit()
    a, b, c = fit.alloc(100), fit.alloc(50), fit.alloc(100)
    assert (a, b, c) == (0, 100, 150)
    fit.free(b, 50)
    assert fit.alloc(60) == 250  # the 50-byte gap is too small
    assert fit.alloc(50) == 100  # ... and taken by the first block that fits it
    fit.free(a, 100)
    fit.free(100, 50)
    assert (fit.starts, fit.sizes) == ([0], [150])  # neighbours merge into one gap
    fit.free(250, 60)
    fit.free(c, 100)  # everything free: the segment shrinks to nothing in use
    assert fit.top == 0 and fit.high_water == 310
