"""The shipped captured traces: each reads, lowers and simulates, and matches its manifest (no torch needed)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import dtrlab
from dtrlab.capture.peakgap import in_place, peak_gaps
from dtrlab.sim.simulate import baseline, budget_from_ratio, simulate
from dtrlab.trace import load, open_source
from dtrlab.trace.read import Call, Constant, Memory, Mutate, read_trace

SHIPPED = Path(dtrlab.__file__).parent / "data" / "traces"
OWN = "dtrlab."  # the recorder's own operators' prefix (capture/naming.py: REBIND_OP, VIEW_OP; it needs torch)


def test_shipped_traces_match_their_manifest():
    # Every figure the manifest states, computed afresh from the shipped trace files.
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    total_bytes = sum(p.stat().st_size for p in SHIPPED.iterdir())
    assert total_bytes < 10 * 2**20
    programs = load(SHIPPED, cache=False)
    sources = {s.name: s for s in open_source(SHIPPED)}
    assert len(programs) == len(manifest["models"]) == 5
    for entry, program in zip(manifest["models"], programs):
        assert program.name == entry["model"]
        ins = read_trace(sources[program.name]).instructions
        # The step's operators; the recorder's own CALLs (dtrlab.rebind, dtrlab.view: aliases at no
        # cost) are not among them.
        assert sum(isinstance(x, (Call, Mutate)) and not x.name.startswith(OWN) for x in ins) == entry["operators"]
        assert sum(not c and not n.startswith(OWN) for c, n in zip(program.op_constant, program.op_names)) == \
            entry["operators"], program.name
        assert baseline(program).peak_bytes == entry["simulated_peak_bytes"]
        assert entry["recorded_peak_bytes"] <= entry["simulated_peak_bytes"]
        # Ratio 1.0 is the unbounded peak: nothing is evicted there, as unbounded.
        for budget in (None, budget_from_ratio(program, 1.0)):
            result = simulate(program, budget)
            assert (result.outcome, result.evictions) == ("ok", 0), (program.name, budget)


def _manifest() -> dict:
    return {m["model"]: m for m in json.loads((SHIPPED / "manifest.json").read_text())["models"]}


def test_mutate_in_place_gives_the_recorders_peak():
    # The recorder measured its peak on the live storages when the traces were captured; the
    # trace format's MUTATE (a new copy of the written storage) is the whole difference.
    manifest = _manifest()
    gaps = {g.trace: g for g in peak_gaps(SHIPPED)}
    assert sorted(gaps) == sorted(manifest)
    for name, g in gaps.items():
        # The in-place peak is simulated here from the rewritten trace; the manifest's number is the recorder's.
        assert g.in_place_peak_bytes == manifest[name]["recorded_peak_bytes"], name
        assert g.simulated_peak_bytes == manifest[name]["simulated_peak_bytes"]
    # Figures of the captures shipped on 2026-12-03 (python -m dtrlab.capture.ship, torch 2.13, CPU).
    # The LSTM's gates are written in place through four views of one storage: the views moved to
    # each new version (dtrlab.rebind), the copies add nothing at the peak (37.3% did before).
    lstm = gaps["lstm"]
    assert (lstm.recorded_peak_bytes, lstm.simulated_peak_bytes) == (7_905_284, 7_905_284)
    assert set(lstm.mutates) >= {"aten.sigmoid_.default", "aten.tanh_.default"}
    # Batch norm writes its running statistics, constants: their owner keeps the originals (COPY)
    # beside the written copies, which the unbounded run counts, as the engines and the live runtime do.
    densenet = gaps["densenet"]
    assert (densenet.recorded_peak_bytes, densenet.simulated_peak_bytes) == (64_136_568, 64_262_808)
    assert densenet.mutates["aten.native_batch_norm.default"] == 120


def test_in_place_rewrite_keeps_every_operator():
    (source,) = [s for s in open_source(SHIPPED) if s.name == "lstm"]
    text = read_trace(source)
    rewritten = in_place(text.instructions)
    ops = [(x.name, x.args) for x in text.instructions if isinstance(x, (Call, Mutate))]
    assert [(x.name, x.args) for x in rewritten if isinstance(x, (Call, Mutate))] == ops
    assert not any(isinstance(x, Mutate) for x in rewritten)


def test_manifest_descriptions_are_the_zoos_words_for_the_shipped_sizes():
    pytest.importorskip("torch", reason="the zoo needs torch (pip install -e '.[capture]')")
    from dtrlab.capture.ship import SHIPPED_SIZES
    from dtrlab.capture.zoo import ZOO

    for name, entry in _manifest().items():
        sizes = {k: tuple(v) if isinstance(v, list) else v for k, v in entry["shapes"].items()}
        assert sizes == SHIPPED_SIZES[name]
        assert entry["description"] == ZOO[name].description(**sizes)
    assert "input 128, hidden 256, 32 steps" in _manifest()["lstm"]["description"]


def test_lstm_shapes_are_what_its_trace_holds():
    # Independent of the zoo: the constants' bytes are the parameters and data at those shapes.
    shapes = _manifest()["lstm"]["shapes"]
    batch, d_in, hidden, seq = shapes["batch"], shapes["input_size"], shapes["hidden"], shapes["seq"]
    (source,) = [s for s in open_source(SHIPPED) if s.name == "lstm"]
    ins = read_trace(source).instructions
    constants = {x.name for x in ins if isinstance(x, Constant)}
    sizes = {x.size_bytes for x in ins if isinstance(x, Memory) and x.name in constants}
    fp32 = 4
    assert sizes == {4 * hidden * fp32,  # the bias
                     seq * batch * d_in * fp32, seq * batch * hidden * fp32,  # input and target
                     4 * hidden * d_in * fp32, 4 * hidden * hidden * fp32}  # the two weight matrices
    assert Counter(x.name for x in ins if isinstance(x, Call))["aten.unsafe_split.Tensor"] == seq  # a cell a step
