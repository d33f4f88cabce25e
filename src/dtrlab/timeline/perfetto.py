"""A run as a Perfetto trace (protobuf TrackEvent packets, each framed as a Trace's `packet` field):
operators, nested rematerializations, evictions and memory counters.

Owns the tracks, their names and the packets; every value comes from the run's event log. A packet
with names or annotations is built with the perfetto package's TracePacket; the plain ones (counter
values and slice ends, most of a long run's packets) are encoded here, byte for byte as the package
serializes them (field-number order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..sim.instruments import COMPUTE, EVENT_KINDS, EVICT, EVICT_EAGER
from .source import START_CLOCK_NS, Timeline, frames

# Track uuids: one root for the run, slices and instants under it, then the counters.
ROOT, OPERATORS, REMATS, EVICTIONS, EAGER, PENDING = 1, 2, 3, 4, 5, 6
RESIDENT, PINNED, LOCKED, BUDGET, POOL = 10, 11, 12, 13, 14
TRACK_NAMES = {OPERATORS: "operators (the schedule's own computes)",
               REMATS: "rematerializations (nested by recursion depth)",
               PENDING: "pending at the OOM (the stack that ran out of memory)",
               EVICTIONS: "evictions chosen by the policy", EAGER: "eager evictions (last release)",
               RESIDENT: "resident bytes", PINNED: "pinned bytes", LOCKED: "locked bytes (unpinned)",
               BUDGET: "budget bytes", POOL: "evictable storages"}
# Which log column each counter track draws, and its unit.
COUNTERS = ((RESIDENT, "memory_bytes"), (PINNED, "pinned_bytes"), (LOCKED, "locked_bytes"), (POOL, "pool_size"))
SEQUENCE_ID = 1
# How many output names a slice lists before it says how many more there are.
MAX_OUTPUT_NAMES = 8

# Order of packets at one log row (a "slot"): frames opening there, an operator's own compute
# starting, an eviction, a frame closing, then the counters after the row.
_OPEN, _OWN, _INSTANT, _CLOSE, _COUNTER = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class PerfettoStats:
    """What a written trace holds: packets, slices per track, instants, counter values."""

    packets: int
    operator_slices: int
    remat_slices: int
    pending_slices: int
    evictions: int
    eager_evictions: int
    counter_values: int


class _Interned:
    """Perfetto's interning of event and annotation names: each string is sent once on the sequence."""

    def __init__(self) -> None:
        self.events: dict[str, int] = {}
        self.annotations: dict[str, int] = {}

    def event(self, packet, name: str) -> int:
        return self._iid(self.events, packet.interned_data.event_names, name)

    def annotation(self, packet, name: str) -> int:
        return self._iid(self.annotations, packet.interned_data.debug_annotation_names, name)

    @staticmethod
    def _iid(table: dict[str, int], entries, name: str) -> int:
        iid = table.get(name)
        if iid is None:  # first use on the sequence: this packet carries the string
            iid = table[name] = len(table) + 1
            entry = entries.add()
            entry.iid, entry.name = iid, name
        return iid


def _outputs(program, op: int) -> str:
    start, n = int(program.op_out_start[op]), int(program.op_n_out[op])
    names = [program.tensor_names[t] for t in range(start, start + min(n, MAX_OUTPUT_NAMES))]
    more = f" (+{n - MAX_OUTPUT_NAMES} more)" if n > MAX_OUTPUT_NAMES else ""
    return ", ".join(names) + more


def _plan(tl: Timeline) -> list[tuple]:
    """Every packet to write as (slot, order, depth, ts_ns, what, row), in a valid order once sorted:
    a frame opens before the frames it waits for, and closes after them."""
    log, keep = tl.log, tl.kept()
    lo = tl.window.start_ns if tl.window else -math.inf
    hi = tl.window.end_ns if tl.window else math.inf
    clock, kind, depth = log.clock_ns.tolist(), log.kind.tolist(), log.depth.tolist()
    program = tl.program
    cost = program.op_cost_ns[program.tensor_op[np.maximum(log.tensor, 0)]].tolist()
    fr = frames(log)
    plan: list[tuple] = []
    compute = EVENT_KINDS[COMPUTE]
    for r, opened, after in zip(fr.row.tolist(), fr.opened_ns.tolist(), fr.opened_after.tolist()):
        end = clock[r]
        if kind[r] == compute:
            start, slot = end - cost[r], r  # the operator's own compute: the rows before it are its inputs'
            order = _OWN
        else:
            start, slot, order = opened, after + 1, _OPEN
        if end < lo or start > hi:
            continue
        plan.append((slot, order, depth[r], max(start, lo), "begin", r))
        plan.append((r, _CLOSE, -depth[r], min(end, hi), "end", r))
    plan += _pending(tl, fr, clock, depth, lo, hi)
    evict, eager = EVENT_KINDS[EVICT], EVENT_KINDS[EVICT_EAGER]
    last = {track: None for track, _ in COUNTERS}
    columns = {track: getattr(log, name).tolist() for track, name in COUNTERS}
    for r in np.flatnonzero(keep).tolist():
        if kind[r] in (evict, eager):
            plan.append((r, _INSTANT, 0, clock[r], "instant", r))
        for track, _ in COUNTERS:
            v = columns[track][r]
            if v != last[track]:
                last[track] = v
                plan.append((r, _COUNTER, track, clock[r], "counter", r))
    plan.sort(key=lambda p: p[:3])
    return plan


def _pending(tl: Timeline, fr, clock: list, depth: list, lo: float, hi: float) -> list[tuple]:
    """The frames still on the stack when the run ran out of memory, open from their push to the OOM;
    their row is -(1 + depth), as they close no row of the log."""
    oom = tl.oom
    if oom is None or not oom.frames:
        return []
    n = len(clock)
    frame_depth = np.asarray(depth, np.int64)[fr.row]
    out = []
    for f in oom.frames:
        # Pushed when the last finished frame no deeper than it closed: what finished since is deeper.
        earlier = fr.row[frame_depth <= f.depth]
        after = int(earlier[-1]) if len(earlier) else -1
        opened = clock[after] if after >= 0 else START_CLOCK_NS
        if oom.clock_ns < lo or opened > hi:
            continue
        out.append((after + 1, _OPEN, f.depth, max(opened, lo), "pending", -(1 + f.depth)))
        out.append((n, _CLOSE, -f.depth, min(oom.clock_ns, hi), "end-pending", -(1 + f.depth)))
    return out


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of n (a negative int64 as its 64-bit two's complement)."""
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    if n < 0:
        n += 1 << 64
    out = []
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(message, field: str, wire_type: int) -> bytes:
    return _varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire_type)


_VARINT, _LEN = 0, 2
_TRACE_PACKET = b"\x0a"  # Trace.packet = 1, length-delimited


class _Out:
    """The trace file: each packet framed as one Trace `packet` field."""

    def __init__(self, f) -> None:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

        self.f = f
        te = TrackEvent
        self.ts = _tag(TracePacket, "timestamp", _VARINT)
        self.tail_seq = _tag(TracePacket, "trusted_packet_sequence_id", _VARINT) + _varint(SEQUENCE_ID)
        self.event = _tag(TracePacket, "track_event", _LEN)
        self.flags = (_tag(TracePacket, "sequence_flags", _VARINT)
                      + _varint(TracePacket.SEQ_NEEDS_INCREMENTAL_STATE))
        self.uuid = _tag(te, "track_uuid", _VARINT)
        self.counter_type = _tag(te, "type", _VARINT) + _varint(te.TYPE_COUNTER)
        self.end_type = _tag(te, "type", _VARINT) + _varint(te.TYPE_SLICE_END)
        self.value = _tag(te, "counter_value", _VARINT)

    def write(self, packet) -> None:
        self.raw(packet.SerializeToString())

    def raw(self, data: bytes) -> None:
        self.f.write(_TRACE_PACKET + _varint(len(data)) + data)

    def _plain(self, ts: int, event: bytes) -> None:
        self.raw(self.ts + _varint(int(ts)) + self.tail_seq + self.event + _varint(len(event)) + event + self.flags)

    def counter(self, ts: int, track: int, value: int) -> None:
        self._plain(ts, self.counter_type + self.uuid + _ONE_BYTE[track] + self.value + _varint(int(value)))

    def end(self, ts: int, track: int) -> None:
        self._plain(ts, self.end_type + self.uuid + _ONE_BYTE[track])


def _descriptor(out: _Out, uuid: int, name: str, parent: int | None, counter_unit=None, first=False) -> None:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, TracePacket

    packet = TracePacket()
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    if first:
        packet.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    d = packet.track_descriptor
    d.uuid, d.name = uuid, name
    if parent is not None:
        d.parent_uuid = parent
    if counter_unit is not None:
        d.counter.unit = getattr(CounterDescriptor, counter_unit)
    out.write(packet)


def write_perfetto(tl: Timeline, path: str | Path) -> PerfettoStats:
    """Write tl (its window) to `path` as a Perfetto protobuf trace; the counts of what it holds."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

    program, log = tl.program, tl.log
    names = program.tensor_names
    roots = program.storage_root
    terms = log.term_names
    plan = _plan(tl)
    n = {"packets": 0, "operator_slices": 0, "remat_slices": 0, "pending_slices": 0, "evictions": 0, "eager_evictions": 0,
         "counter_values": 0}
    compute, evict = EVENT_KINDS[COMPUTE], EVENT_KINDS[EVICT]
    kind, storage, tensor = log.kind, log.storage, log.tensor
    interned = _Interned()
    needs_state = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    with open(path, "wb") as f:
        out = _Out(f)
        _descriptor(out, ROOT, f"dtrlab: {tl.title}", None, first=True)
        for uuid in (OPERATORS, REMATS, PENDING, EVICTIONS, EAGER):
            _descriptor(out, uuid, TRACK_NAMES[uuid], ROOT)
        for uuid in (RESIDENT, PINNED, LOCKED, BUDGET):
            _descriptor(out, uuid, TRACK_NAMES[uuid], ROOT, "UNIT_SIZE_BYTES")
        _descriptor(out, POOL, TRACK_NAMES[POOL], ROOT, "UNIT_COUNT")
        n["packets"] += 11
        frames_at_oom = {f.depth: f for f in tl.oom.frames} if tl.oom is not None else {}

        def packet(ts: int):
            p = TracePacket()
            p.timestamp = int(ts)
            p.trusted_packet_sequence_id = SEQUENCE_ID
            p.sequence_flags = needs_state
            return p

        def annotate(p, name: str, value) -> None:
            a = p.track_event.debug_annotations.add()
            a.name_iid = interned.annotation(p, name)
            if isinstance(value, str):
                a.string_value = value
            elif isinstance(value, float):
                a.double_value = value
            else:
                a.int_value = int(value)

        first_ts = plan[0][3] if plan else (tl.window.start_ns if tl.window else 1)
        out.counter(first_ts, BUDGET, tl.budget_bytes)
        n["packets"] += 1
        n["counter_values"] += 1
        columns = {track: getattr(log, name).tolist() for track, name in COUNTERS}
        is_compute = (kind == compute).tolist()
        for _slot, _order, extra, ts, what, r in plan:
            n["packets"] += 1
            if what == "counter":
                out.counter(ts, extra, columns[extra][r])
                n["counter_values"] += 1
                continue
            if what == "end":
                out.end(ts, OPERATORS if is_compute[r] else REMATS)
                continue
            if what == "end-pending":
                out.end(ts, PENDING)
                continue
            p = packet(ts)
            ev = p.track_event
            if what == "begin":
                t = int(tensor[r])
                op = int(program.tensor_op[t])
                remat = kind[r] != compute
                ev.type = TrackEvent.TYPE_SLICE_BEGIN
                ev.track_uuid = REMATS if remat else OPERATORS
                ev.name_iid = interned.event(p, program.op_names[op])
                annotate(p, "tensor", names[t])
                annotate(p, "outputs", _outputs(program, op))
                annotate(p, "cost_ns", int(program.op_cost_ns[op]))
                annotate(p, "storage", int(storage[r]))
                if remat:
                    annotate(p, "depth", int(log.depth[r]))
                n["remat_slices" if remat else "operator_slices"] += 1
            elif what == "pending":
                f = frames_at_oom[-(r + 1)]
                op = f.op
                ev.type, ev.track_uuid = TrackEvent.TYPE_SLICE_BEGIN, PENDING
                ev.name_iid = interned.event(p, program.op_names[op])
                annotate(p, "tensor", names[f.tensor])
                annotate(p, "outputs", _outputs(program, op))
                annotate(p, "cost_ns", int(program.op_cost_ns[op]))
                annotate(p, "depth", f.depth)
                annotate(p, "remat", int(f.remat))
                annotate(p, "need_bytes", f.need_bytes)
                n["pending_slices"] += 1
            else:  # an instant
                s = int(storage[r])
                by_policy = kind[r] == evict
                ev.type = TrackEvent.TYPE_INSTANT
                ev.track_uuid = EVICTIONS if by_policy else EAGER
                ev.name_iid = interned.event(p, "evict" if by_policy else "evict (eager)")
                annotate(p, "storage", s)
                annotate(p, "tensor", names[int(roots[s])])
                annotate(p, "size_bytes", int(program.storage_size_bytes[s]))
                if by_policy:
                    score = float(log.score[r])
                    if not math.isnan(score):
                        annotate(p, "score", score)
                    for k, term in enumerate(terms):
                        annotate(p, term, float(log.terms[r, k]))
                n["evictions" if by_policy else "eager_evictions"] += 1
            out.write(p)
    return PerfettoStats(**n)
