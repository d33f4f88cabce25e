"""What the report's churn and mechanisms read of one run of the subject policy, simulated once.

Owns RunFacts (the run's counters, its per-storage counts, its deepest moment and the head of its
policy-eviction log), their place in the report's memo, `sweep_run`, which keeps them as the sweep's
workers run the report's curves, and `prefetch`, which simulates the missing ones (report.pool). A run
that finished or ran out of memory is the same run with the overhead cap or without it; a run the cap
stopped is replayed with that cap, so its facts are of the run as far as the cap let it go. Without
the compiled engine there are no facts: each consumer then takes its own path (analysis.churn,
analysis.mechanism, analysis.divergence).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..analysis.churn import storage_counts
from ..analysis.divergence import policy_log
from ..analysis.mechanism import worst_moment
from ..sim import cengine
from ..sim.policies import get_policy
from ..sim.result import OK, OOM, RunResult
from ..sim.runtimes import get_runtime
from ..sim.simulate import remat_limit_ns, result_of, simulate
from ..sweep.grid import Keep
from ..trace.lower import Program
from . import pool
from .memo import memo, stored
from .plan import RUNTIME, SUBJECT_POLICY

# Policy evictions kept of each run's log: two runs part within their first few dozen on every
# public trace; a head that ends before they part is run again whole (analysis.divergence).
HEAD_EVICTIONS = 4096


@dataclass(frozen=True)
class RunFacts:
    """counters: storage_counts' first value (outcome, clock_ns, remat_ns, ...); arrays: its
    per-storage counts; deepest: worst_moment of the run's event log; head: the first rows of
    policy_log; policy_evictions: the rows of the whole log; capped: replayed with the cap."""

    counters: dict
    arrays: dict
    deepest: dict
    head: np.ndarray
    policy_evictions: int
    capped: bool


def is_capped(run) -> bool:
    """Whether the overhead cap stopped the run (anything but a finished or out-of-memory run)."""
    return run.outcome not in (OK, OOM)


def available() -> bool:
    """Whether runs have facts here: the compiled engine runs the subject policy and runtime."""
    return cengine.supports(get_policy(SUBJECT_POLICY), get_runtime(RUNTIME))


def _cap(run, overhead_limit: float) -> float | None:
    """The cap a stored run is replayed with: the plan's for a capped run, none for the others."""
    return overhead_limit if is_capped(run) else None


def _key(program: Program, budget_bytes: int, overhead_limit: float | None) -> dict:
    return {"trace": program.sha256, "budget": int(budget_bytes), "policy": SUBJECT_POLICY,
            "overhead_limit": overhead_limit}


def _simulate(program: Program, budget_bytes: int, overhead_limit: float | None, seed: int = 0) -> RunFacts:
    got = cengine.run_compiled(program, int(budget_bytes), get_policy(SUBJECT_POLICY), get_runtime(RUNTIME),
                               remat_limit_ns(program, overhead_limit), seed, counts=True, events=True)
    events, arrays = got.pop("events"), got.pop("storage_counts")
    log = policy_log(events)
    return RunFacts(got, arrays, worst_moment(events), np.ascontiguousarray(log[:HEAD_EVICTIONS]), len(log),
                    overhead_limit is not None)


# --- kept by the sweep's workers as they run ---------------------------------------------------------------


def keeping(specs, out: Path) -> list:
    """The specs, those of the subject policy and runtime set to keep their facts in `out`'s memo
    as the sweep runs them (sweep_run), so that no stage runs them again for their facts."""
    keep = Keep(f"{__name__}:sweep_run", str(out))
    return [replace(s, keep=keep) if s.policy == SUBJECT_POLICY and s.runtime == RUNTIME and s.solve is None
            else s for s in specs]


def sweep_run(program: Program, spec, folder: str) -> RunResult:
    """A sweep worker's run of `spec` (sweep.grid.Keep): simulate()'s result, with the run's facts
    kept in `folder`'s memo when the compiled engine runs it. A run that ended before the cap has
    the facts of the uncapped run (is_capped); a capped run those of the run with the cap."""
    pol, rt = get_policy(spec.policy), get_runtime(spec.runtime)
    if spec.engine == "python" or not available() or pol.name != SUBJECT_POLICY or rt.name != RUNTIME:
        return simulate(program, spec.budget_bytes, pol, rt, overhead_limit=spec.overhead_limit,
                        seed=spec.seed, engine=spec.engine)
    got = _simulate(program, spec.budget_bytes, spec.overhead_limit, spec.seed)
    result = result_of(program, spec.budget_bytes, pol, rt, dict(got.counters), "c")
    limit = _cap(result, spec.overhead_limit)
    try:
        memo(Path(folder), "facts", _key(program, spec.budget_bytes, limit),
             lambda: replace(got, capped=limit is not None))
    except OSError:  # a worker that cannot write there (another machine): prefetch runs it again
        pass
    return result


def facts(out: Path, program: Program, run, overhead_limit: float) -> RunFacts | None:
    """The run's facts (simulated now unless the memo has them), or None without the compiled engine.
    `run`: a stored run of the subject policy (its budget_bytes and outcome); overhead_limit: the
    plan's, which stopped the run when it is capped."""
    if not available():
        return None
    return _memo(out, program, run.budget_bytes, _cap(run, overhead_limit))


def _memo(out: Path, program: Program, budget_bytes: int, limit: float | None) -> RunFacts:
    return memo(out, "facts", _key(program, budget_bytes, limit), lambda: _simulate(program, budget_bytes, limit))


def counted(out: Path, program: Program, run, overhead_limit: float) -> tuple[dict, dict]:
    """The run's storage_counts (counters, per-storage arrays): its facts', or without the compiled
    engine a run of the Python engine (with the cap, for a capped run)."""
    got = facts(out, program, run, overhead_limit)
    if got is not None:
        return got.counters, got.arrays
    return storage_counts(program, run.budget_bytes, SUBJECT_POLICY, RUNTIME, _cap(run, overhead_limit))


def counts_of(out: Path, program: Program, run, overhead_limit: float) -> dict:
    """The run's per-storage counts (counted's arrays)."""
    return counted(out, program, run, overhead_limit)[1]


# --- simulating many on worker processes ------------------------------------------------------------


def _one(out: str, sha: str, budget_bytes: int, limit: float | None) -> None:
    _memo(Path(out), pool.program(sha), budget_bytes, limit)


def prefetch(out: Path, wanted, overhead_limit: float, workers: int | None,
             tick: Callable[[str], None] = lambda _what: None) -> int:
    """Simulate the facts of every (program, run) of `wanted` the memo lacks, each run once, on
    `workers` processes (report.pool); tick(what) after each. Returns how many were simulated."""
    if not available():
        return 0
    todo = {}
    for program, run in wanted:
        limit = _cap(run, overhead_limit)
        if not stored(out, "facts", _key(program, run.budget_bytes, limit)):
            todo[(program.sha256, int(run.budget_bytes), limit)] = program

    def said(key) -> str:
        return f"{todo[key].name} at {key[1]:,} B" + (" (capped)" if key[2] is not None else "")
    # The longest first: the capped runs thrash up to the cap.
    order = sorted(todo, key=lambda k: (k[2] is None, -todo[k].n_ops))
    pool.run_tasks([pool.Task(_one, (str(out), *key), said(key)) for key in order],
                   {key[0]: program for key, program in todo.items()}, workers, tick)
    return len(todo)
