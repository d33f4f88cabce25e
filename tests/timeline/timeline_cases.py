"""Runs the timeline tests read: public-trace runs (one that runs out of memory, one that
rematerializes and finishes), recorded once per session, and the readers' own views of a file."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from dtrlab.sim.simulate import budget_from_ratio
from dtrlab.timeline.source import record
from dtrlab.trace import load_one

from conftest import TRACES, require_shared

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from helpers import synthetic_program  # noqa: E402

__all__ = ["public_run", "synthetic_program", "perfetto_packets", "replay_device_trace"]

# (trace, ratio): ResNet-32 inside its inversion (OOM, the report's case), and runs that finish.
PUBLIC_RUNS = (("resnet32", 0.102), ("resnet32", 0.2), ("unet", 0.6))


@functools.lru_cache(maxsize=None)
def public_run(name: str, ratio: float):
    require_shared()
    program = load_one(str(TRACES), name)
    return record(program, budget_from_ratio(program, ratio), ratio=ratio)


def perfetto_packets(path) -> list:
    """Every packet of a Perfetto protobuf file, parsed by the perfetto package's own protos."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    return list(Trace.FromString(Path(path).read_bytes()).packet)


def replay_device_trace(entries: list[dict]) -> tuple[int, int]:
    """(peak, final) requested bytes alive over a memory snapshot's device trace, checking that no
    two live blocks overlap and that every free names a live block."""
    live: dict[int, int] = {}
    alive = peak = 0
    for e in entries:
        if e["action"] == "alloc":
            lo, hi = e["addr"], e["addr"] + e["size"]
            for addr, size in live.items():
                assert hi <= addr or addr + size <= lo, f"overlapping blocks at {addr:#x} and {lo:#x}"
            live[e["addr"]] = e["size"]
            alive += e["size"]
            peak = max(peak, alive)
        elif e["action"] == "free_completed":
            assert live.pop(e["addr"]) == e["size"]
            alive -= e["size"]
    return peak, alive
