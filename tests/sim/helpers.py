"""Building Programs for engine tests from synthetic traces, through the real writer and reader."""

from __future__ import annotations

from dtrlab.sim.simulate import baseline, simulate
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


def check_row(program, row: dict, engine: str) -> None:
    """One row of ../shared/reference/parity.jsonl, on `program`: baseline, budget and every counter."""
    base = baseline(program)
    assert (base.peak_bytes, base.compute_ns) == (row["baseline_memory"], row["baseline_compute"])
    assert int(base.peak_bytes * row["ratio"]) == row["budget"]
    result = simulate(program, row["budget"], row["heuristic"], row["runtime"], engine=engine)
    got = {
        "outcome": "OOM" if result.outcome == "oom" else result.outcome,
        "clock": result.clock_ns,
        "overhead": result.overhead,
        "remat_compute": result.remat_ns,
        "max_memory": result.peak_bytes,
        "evictions_heuristic": result.evictions,
        "distinct_evicted_heuristic": result.distinct_evicted,
        "evictions_eager": result.eager_evictions,
    }
    assert got == {k: row[k] for k in got}
