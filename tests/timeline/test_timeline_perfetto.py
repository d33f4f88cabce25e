"""The Perfetto writer, read back with the perfetto package's protos: every packet parses, the slices
and instants are the run's counters (operators, recompute time, evictions), and slices nest as the
engine's frames do."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dtrlab.sim.instruments import EVENT_KINDS, EVICT
from dtrlab.timeline import perfetto as pf
from dtrlab.timeline.source import Window
from dtrlab.sim.result import OK, OOM

from conftest import needs_shared
from timeline_cases import PUBLIC_RUNS, perfetto_packets, public_run

pytestmark = needs_shared


def _annotations(packet, names: dict) -> dict:
    out = {}
    for a in packet.track_event.debug_annotations:
        which = a.WhichOneof("value")
        out[names[a.name_iid]] = getattr(a, which)
    return out


def _read(path):
    """(descriptors by uuid, [(packet, annotations)] of track events), interned names resolved."""
    packets = perfetto_packets(path)
    tracks, events = {}, []
    event_names, annotation_names = {}, {}
    for p in packets:
        for e in p.interned_data.event_names:
            event_names[e.iid] = e.name
        for e in p.interned_data.debug_annotation_names:
            annotation_names[e.iid] = e.name
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        elif p.HasField("track_event"):
            events.append((p, _annotations(p, annotation_names), event_names.get(p.track_event.name_iid)))
    return packets, tracks, events


def _write(tmp_path, tl, name="run.pftrace"):
    path = tmp_path / name
    stats = pf.write_perfetto(tl, path)
    return path, stats


@pytest.mark.parametrize("name,ratio", PUBLIC_RUNS)
def test_slices_and_instants_are_the_runs_counts(tmp_path, name, ratio):
    tl = public_run(name, ratio)
    r = tl.result
    path, stats = _write(tmp_path, tl)
    packets, tracks, events = _read(path)
    assert len(packets) == stats.packets
    # At an OOM, the frames left on the stack are slices of their own track, one per frame.
    assert stats.pending_slices == (len(tl.oom.frames) if r.outcome == OOM else 0)
    assert {t.name for t in tracks.values()} >= set(pf.TRACK_NAMES.values())
    begins = Counter(p.track_event.track_uuid for p, _, _ in events if p.track_event.type == p.track_event.TYPE_SLICE_BEGIN)
    ends = Counter(p.track_event.track_uuid for p, _, _ in events if p.track_event.type == p.track_event.TYPE_SLICE_END)
    assert begins == ends
    if r.outcome == OK:  # every operator of the program ran once as the schedule's own compute
        assert begins[pf.OPERATORS] == tl.program.n_ops
    # Recompute time: the remat slices' operator costs add up to the engine's remat_ns counter.
    remat_cost = sum(a["cost_ns"] for p, a, _ in events
                     if p.track_event.track_uuid == pf.REMATS and p.track_event.type == p.track_event.TYPE_SLICE_BEGIN)
    assert remat_cost == r.remat_ns and (r.remat_ns == 0) == (begins[pf.REMATS] == 0)
    instants = Counter(p.track_event.track_uuid for p, _, _ in events if p.track_event.type == p.track_event.TYPE_INSTANT)
    assert instants[pf.EVICTIONS] == r.evictions and instants[pf.EAGER] == r.eager_evictions
    counters = defaultdict(list)
    for p, _, _ in events:
        if p.track_event.type == p.track_event.TYPE_COUNTER:
            counters[p.track_event.track_uuid].append(p.track_event.counter_value)
    assert counters[pf.BUDGET] == [tl.budget_bytes]
    assert max(counters[pf.RESIDENT]) <= min(r.peak_bytes, tl.budget_bytes)
    assert all(a >= b for a, b in zip(counters[pf.RESIDENT], counters[pf.PINNED]))
    if r.outcome == OOM:  # the last resident value is the memory the OOM snapshot saw
        assert counters[pf.RESIDENT][-1] == tl.oom.memory_bytes
    assert stats.counter_values == sum(len(v) for v in counters.values())


@pytest.mark.parametrize("name,ratio", PUBLIC_RUNS)
def test_evictions_carry_storage_size_and_every_score_term(tmp_path, name, ratio):
    tl = public_run(name, ratio)
    path, _ = _write(tmp_path, tl)
    _, _, events = _read(path)
    policy = [(p, a) for p, a, _ in events if p.track_event.track_uuid == pf.EVICTIONS]
    chosen = tl.log.rows(kind=EVICT)
    assert [a["storage"] for _, a in policy] == chosen.storage.tolist()
    assert [p.timestamp for p, _ in policy] == chosen.clock_ns.tolist()
    for (p, a), k in zip(policy, range(len(chosen))):
        assert a["size_bytes"] == tl.program.storage_size_bytes[a["storage"]]
        assert a["score"] == chosen.score[k]
        assert [a[t] for t in chosen.term_names] == chosen.terms[k].tolist()


@pytest.mark.parametrize("name,ratio", PUBLIC_RUNS)
def test_slices_nest_as_the_engines_frames(tmp_path, name, ratio):
    tl = public_run(name, ratio)
    path, _ = _write(tmp_path, tl)
    _, _, events = _read(path)
    last_ts = 0
    stacks = defaultdict(list)
    pending = {f.depth for f in tl.oom.frames} if tl.oom is not None else set()
    nested = 0
    for p, a, _ in events:
        ev = p.track_event
        assert p.timestamp >= last_ts, "timestamps go back"
        last_ts = p.timestamp
        if ev.type == ev.TYPE_SLICE_BEGIN:
            stack = stacks[ev.track_uuid]
            if ev.track_uuid == pf.OPERATORS:
                assert not stack, "operators never overlap"
            elif stack:  # a rematerialization inside another is one frame deeper
                assert a["depth"] == stack[-1][1]["depth"] + 1
                nested += 1
            elif ev.track_uuid == pf.REMATS:  # the outermost: under an operator, or a frame left pending
                assert a["depth"] in (0, 1) or a["depth"] - 1 in pending
            stack.append((p.timestamp, a))
        elif ev.type == ev.TYPE_SLICE_END:
            begin_ts, a0 = stacks[ev.track_uuid].pop()
            assert p.timestamp >= begin_ts
            if ev.track_uuid == pf.OPERATORS:  # an operator's slice is its own compute
                assert p.timestamp - begin_ts == a0["cost_ns"]
    assert all(not s for s in stacks.values())
    if tl.log.depth.max() >= 2:  # chains of rematerializations show as nested slices
        assert nested > 0


def test_a_window_keeps_only_its_stretch_and_bounds_the_file(tmp_path):
    tl = public_run("resnet32", 0.102)
    clock = tl.log.clock_ns
    window = Window(int(clock[len(clock) // 3]), int(clock[len(clock) // 2]))
    full, full_stats = _write(tmp_path, tl, "full.pftrace")
    part, part_stats = _write(tmp_path, tl.cut(window), "part.pftrace")
    assert part.stat().st_size < full.stat().st_size / 2
    _, _, events = _read(part)
    assert all(window.start_ns <= p.timestamp <= window.end_ns for p, _, _ in events)
    inside = (clock >= window.start_ns) & (clock <= window.end_ns)
    evictions = int(((tl.log.kind == EVENT_KINDS[EVICT]) & inside).sum())
    assert part_stats.evictions == evictions > 0
    assert sum(1 for p, _, _ in events if p.track_event.track_uuid == pf.EVICTIONS) == evictions


@pytest.mark.parametrize("what", ["counter", "end"])
@given(ts=st.integers(0, 2**63 - 1), value=st.integers(-(2**63), 2**63 - 1),
       track=st.sampled_from(sorted(pf.TRACK_NAMES)))
def test_a_plain_packet_is_the_protos_own_bytes(what, ts, value, track):
    """The counters and slice ends encoded by hand: framed as the package frames a Trace's packet."""
    import io

    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

    f = io.BytesIO()
    out = pf._Out(f)
    p = TracePacket(timestamp=ts, trusted_packet_sequence_id=pf.SEQUENCE_ID,
                    sequence_flags=TracePacket.SEQ_NEEDS_INCREMENTAL_STATE)
    p.track_event.track_uuid = track
    if what == "counter":
        out.counter(ts, track, value)
        p.track_event.type, p.track_event.counter_value = TrackEvent.TYPE_COUNTER, value
    else:
        out.end(ts, track)
        p.track_event.type = TrackEvent.TYPE_SLICE_END
    trace = Trace()
    trace.packet.append(p)
    assert f.getvalue() == trace.SerializeToString()
