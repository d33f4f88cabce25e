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


# What a reference row says about a run, as dtrlab's RunResult names it.
COLUMNS = {"outcome": "outcome", "clock": "clock_ns", "overhead": "overhead", "remat_compute": "remat_ns",
           "max_memory": "peak_bytes", "evictions_heuristic": "evictions",
           "distinct_evicted_heuristic": "distinct_evicted", "evictions_eager": "eager_evictions"}


def check_row(program, row: dict, engine: str):
    """One row of ../shared/reference/parity.jsonl on `program`: baseline, budget and every counter.

    Returns the RunResult (whose engine a caller may check)."""
    base = baseline(program)
    assert (base.peak_bytes, base.compute_ns) == (row["baseline_memory"], row["baseline_compute"])
    assert int(base.peak_bytes * row["ratio"]) == row["budget"]
    result = simulate(program, row["budget"], row["heuristic"], row["runtime"], engine=engine)
    got = {ref: getattr(result, ours) for ref, ours in COLUMNS.items()}
    got["outcome"] = "OOM" if result.outcome == "oom" else result.outcome
    if result.outcome != "ok":
        # The reference divides the clock where a run stopped too; dtrlab gives an unfinished run no
        # overhead (run_overhead), so the row's figure is checked against the same quotient of its clock.
        assert got["overhead"] is None
        got["overhead"] = result.clock_ns / result.baseline_compute_ns
    assert got == {k: row[k] for k in COLUMNS}
    return result


def compatible_cases() -> list[tuple[str, str]]:
    """Every (policy, runtime) pair the simulator accepts: the cases property tests draw from."""
    from dtrlab.errors import UsageError
    from dtrlab.sim.policies import POLICIES, get_policy
    from dtrlab.sim.runtimes import RUNTIMES
    from dtrlab.sim.simulate import check_compatible

    cases = []
    for p in POLICIES:
        for r in RUNTIMES.values():
            try:
                check_compatible(get_policy(p), r)
            except UsageError:
                continue
            cases.append((p, r.name))
    return cases


def every_instrument():
    from dtrlab.sim.instruments import Instruments

    return Instruments(per_storage=True, memory_series=True, events=True, oom_snapshot=True)


def assert_same_observations(a, b) -> None:
    """Two runs' Observations are equal part for part: counts, memory series, event log row for
    row (NaN equal to NaN), OOM snapshot."""
    import numpy as np

    for name in ("policy_evictions", "eager_evictions", "rematerializations", "memory_series"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.evicted == b.evicted
    assert a.oom == b.oom
    ea, eb = a.events, b.events
    assert ea.term_names == eb.term_names and len(ea) == len(eb)
    for name, col in ea.columns().items():
        other = eb.columns()[name]
        assert col.dtype == other.dtype, name
        same = np.array_equal(col, other, equal_nan=col.dtype.kind == "f")
        if not same:
            rows = np.flatnonzero(~np.all((col == other) | (col != col) & (other != other), axis=-1)
                                  if col.ndim > 1 else (col != other) & ~((col != col) & (other != other)))
            raise AssertionError(f"event column {name} differs first at row {rows[0]}: {col[rows[0]]} != {other[rows[0]]}")


def engines_observe_alike(program, budget, policy, runtime, seed: int = 0, **kwargs) -> None:
    """The run with every instrument on each engine: the same counters and the same observations."""
    ins = every_instrument()
    a = simulate(program, budget, policy, runtime, seed=seed, instruments=ins, engine="python", **kwargs)
    b = simulate(program, budget, policy, runtime, seed=seed, instruments=ins, engine="c", **kwargs)
    da, db = a.to_dict(), b.to_dict()
    assert da.pop("engine") == "python" and db.pop("engine") == "c"
    assert da == db
    assert_same_observations(a.observations, b.observations)
