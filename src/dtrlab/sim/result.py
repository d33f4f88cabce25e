"""What a simulation returns: RunResult, a serializable value with its metadata."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OK, OOM, REMAT_LIMIT, TIMEOUT = "ok", "oom", "remat_limit", "timeout"
INTERRUPTED = "interrupted"  # ended early (Ctrl-C): a partial run, never stored as finished


def run_overhead(outcome: str, clock_ns: int | None, compute_ns: int | None) -> float | None:
    """A run's overhead: its final clock over the compute of one unconstrained step. The one
    definition, for simulated and live runs and stored rows alike.

    None for a run that did not finish (oom, remat_limit, timeout): its clock stopped part way
    through the step, so the quotient measures nothing; None too when there is no compute to
    divide by.
    """
    if outcome != OK or not (compute_ns and compute_ns > 0):
        return None
    return clock_ns / compute_ns


@dataclass(frozen=True)
class RunResult:
    """One simulation: outcome, final clock and the counters of what the policy did.

    clock_ns counts from 1 as the reference runtime's clock does, so an unconstrained run
    ends at baseline_compute_ns + 1 and overhead = clock_ns / baseline_compute_ns (None for a run
    that did not finish: see `run_overhead`).
    """

    outcome: str
    clock_ns: int
    remat_ns: int  # time spent recomputing
    baseline_compute_ns: int
    baseline_peak_bytes: int
    budget_bytes: int | None  # None: unbounded
    evictions: int  # chosen by the policy
    eager_evictions: int  # storages freed at their last release (or banished)
    distinct_evicted: int  # distinct storages among the policy's evictions
    peak_bytes: int
    score_evals: int
    policy: str
    runtime: str
    engine: str
    trace: str = ""
    observations: Any = field(default=None, compare=False, repr=False)
    # Why the Python engine ran where the compiled one was not asked for ("" when the compiled one
    # ran, or the Python one was asked for): said beside `engine` by the CLI's table and JSON.
    engine_note: str = field(default="", compare=False, repr=False)

    @property
    def overhead(self) -> float | None:
        return run_overhead(self.outcome, self.clock_ns, self.baseline_compute_ns)

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("observations")
        d.pop("engine_note")
        d["overhead"] = self.overhead
        return d
