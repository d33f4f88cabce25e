"""A simulation's schedule: every computation, recomputation and free of a run, read off the event log.

Either engine keeps the same event log (sim/instruments.py), so either gives the same schedule.
"""

from __future__ import annotations

import numpy as np

from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME
from ..sim.instruments import COMPUTE as LOG_COMPUTE
from ..sim.instruments import EVENT_KINDS, EVICT, EVICT_EAGER, REMAT, EventLog, Instruments
from ..sim.result import RunResult
from ..sim.simulate import simulate
from ..trace.lower import Program
from .format import COMPUTE, FREE, Schedule, write_schedule

# Only the event log: the other instruments cost time and say nothing a schedule holds.
EVENTS_ONLY = Instruments(per_storage=False, memory_series=False, events=True, oom_snapshot=False)


def maker_name(policy: str, runtime: str) -> str:
    """A simulation's maker, as a schedule's header says it: "dtr/eager-optimized"."""
    return f"{policy}/{runtime}"


def schedule_of_log(program: Program, log: EventLog, made_by: str, budget_bytes: int | None) -> Schedule:
    """The log's computations (first and again) as COMPUTE of the tensor's operator, its evictions
    (the policy's and the eager ones) as FREE of the storage, in the log's order."""
    codes = log.kind
    computes = np.isin(codes, (EVENT_KINDS[LOG_COMPUTE], EVENT_KINDS[REMAT]))
    frees = np.isin(codes, (EVENT_KINDS[EVICT], EVENT_KINDS[EVICT_EAGER]))
    rows = computes | frees
    target = np.where(computes, program.tensor_op[np.where(computes, log.tensor, 0)], log.storage)[rows]
    kind = np.where(computes[rows], COMPUTE, FREE)
    return Schedule(kind.astype(np.int8), target.astype(np.int32), program.sha256, made_by, budget_bytes)


def simulate_schedule(program: Program, budget_bytes: int | None, policy=DEFAULT_POLICY, runtime=DEFAULT_RUNTIME,
                      **kwargs) -> tuple[RunResult, Schedule]:
    """`simulate(...)` (the same arguments) and the run's schedule. An out-of-memory (or remat-limit)
    run's schedule is the prefix it made before it stopped."""
    result = simulate(program, budget_bytes, policy, runtime, instruments=EVENTS_ONLY, **kwargs)
    maker = maker_name(result.policy, result.runtime)
    return result, schedule_of_log(program, result.observations.events, maker, budget_bytes)


def write_run_schedule(path, program: Program, result: RunResult, schedule: Schedule) -> None:
    """Write a simulation's schedule with what the run was in the header (trace, policy, runtime,
    outcome: an out-of-memory run's schedule is a prefix)."""
    write_schedule(schedule, path, extra={"trace": program.name, "policy": result.policy,
                                          "runtime": result.runtime, "outcome": result.outcome})
