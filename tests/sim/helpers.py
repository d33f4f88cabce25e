"""Building Programs for engine tests from synthetic traces, through the real writer and reader."""

from __future__ import annotations

from dtrlab.trace.lower import lower
from dtrlab.trace.read import TraceSource, parse_bytes
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import format_trace


def program_of(instructions, name: str = "synthetic"):
    data = format_trace(instructions).encode()
    source = TraceSource(name, name, f"<{name}>", None, lambda: data)
    return lower(parse_bytes(data, source))


def synthetic_program(seed: int, n_ops: int = 40, **kwargs):
    return program_of(synthetic_trace(seed, n_ops, **kwargs), f"synthetic-{seed}")
