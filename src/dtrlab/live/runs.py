"""`dtrlab run`'s work: a step run plainly, captured (its plan), then K times under a budget, and
the simulation of that plan.

Owns the order of those runs and the figures of each (LiveRun, SimRun, RunReport); the CLI
(commands.py) only checks options and prints.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

import torch

from ..defaults import DEFAULT_RUNTIME
from ..sim.result import OK, OOM, run_overhead
from ..trace.read import Instruction, TraceText
from .plan import Plan, make_plan
from .session import LiveBudgetError, LiveSession

PLAIN_REPEATS = 3  # the plain step's wall time is the median of this many, after a warm-up


def overhead_of(outcome: str, clock_ns: int, remat_ns: int) -> float | None:
    """The simulator's overhead (run_overhead) on a live clock, compute being the clock's first
    runs (it starts at 1, as the engine's: an unbounded step is (compute + 1) / compute)."""
    return run_overhead(outcome, clock_ns, clock_ns - 1 - remat_ns)


@dataclass(frozen=True)
class Figures:
    """What a run under a budget did, in the same terms live and simulated. outcome: ok or oom;
    peak_bytes: the engine's peak; remats: operators rerun; evicted: the storages the policy
    evicted, in order (the plan's storage numbers); overhead: clock / compute (None for a run that
    did not finish)."""

    outcome: str
    budget_bytes: int
    peak_bytes: int
    evictions: int
    eager_evictions: int
    remats: int
    clock_ns: int
    remat_ns: int
    overhead: float | None
    evicted: tuple[int, ...]

    def to_dict(self) -> dict:
        out = asdict(self)
        del out["evicted"]  # long; `same_decisions` compares them
        return out


@dataclass(frozen=True)
class LiveRun(Figures):
    """One step under a LiveSession. error: the LiveBudgetError's line of an oom (the figures are
    those of the step until then); oom_at: where in the step it ran out (the user's line of code
    and the part of the step: LiveBudgetError.where); wall_s: the step's wall time, pinning its outputs included;
    unplanned_remats: replays the plan does not have (values read outside an operator);
    early_bytes: the most bytes of new tensors that existed before room was made for them (the
    session's `early_bytes`: what the process may hold above the budget); engine: the one that
    decided ("c" or "python"); cuda_*: the CUDA
    allocator's own figures (None on CPU); check: the live step against a plain one from the same
    state (`run --check`, live/check.py)."""

    step: int = 1
    engine: str = "python"
    error: str | None = None
    oom_at: str | None = None
    wall_s: float = 0.0
    unplanned_remats: int = 0
    early_bytes: int = 0
    cuda_peak_bytes: int | None = None
    cuda_outside_bytes: int | None = None
    check: dict | None = None  # --check: check.CheckResult.to_dict() (None: not asked, or out of memory)


@dataclass(frozen=True)
class SimRun(Figures):
    """The simulation of the plan, in the same terms."""

    runtime: str = DEFAULT_RUNTIME


DECISION_FIGURES = ("outcome", "evicted", "remats", "eager_evictions", "peak_bytes", "clock_ns")


def decision_differences(a: Figures, b: Figures) -> list[str]:
    """The figures of DECISION_FIGURES in which two runs differ: the outcome, the storages evicted
    in order, the rematerializations, the eager evictions, the peak and the final clock (of a run
    that stopped, those until it stopped)."""
    return [f for f in DECISION_FIGURES if getattr(a, f) != getattr(b, f)]


def same_decisions(a: Figures, b: Figures) -> bool:
    """The same figures of DECISION_FIGURES (decision_differences)."""
    return not decision_differences(a, b)


@dataclass(frozen=True)
class RunReport:
    """What `dtrlab run` measured: the plain step's wall time, the plan's unbounded peak (what a
    ratio is of, as in the simulator), each budgeted step, and the simulation when asked for."""

    plain_wall_s: float
    plan_peak_bytes: int
    budget_bytes: int
    steps: tuple[LiveRun, ...]
    sim: SimRun | None


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def wall_seconds(step: Callable[[], object], device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - start


def plain_seconds(step: Callable[[], object], device: str) -> float:
    """A plain step's wall time: the median of PLAIN_REPEATS (after the caller's warm-up)."""
    return statistics.median(wall_seconds(step, device) for _ in range(PLAIN_REPEATS))


def _drop_grads(step) -> None:
    """Free the last step's gradients before a measured step (a zoo step exposes its model), so the
    allocator's figures start from the step's constants."""
    model = getattr(step, "model", None)
    if model is not None:
        model.zero_grad(set_to_none=True)
    gc.collect()


def live_step(step: Callable[[], object], budget_bytes: float, policy: str, clock: str, seed: int,
              device: str, plan: Plan | Sequence[Instruction] | None, number: int = 1,
              engine: str = "auto") -> LiveRun:
    """One step under a fresh LiveSession (a session covers one step)."""
    _drop_grads(step)
    outside = None
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        outside = torch.cuda.memory_allocated()
    session = LiveSession(budget_bytes=budget_bytes, policy=policy, clock=clock, plan=plan, seed=seed,
                          engine=engine)
    error = oom_at = None
    start = time.perf_counter()
    try:
        with session:
            step()
    except LiveBudgetError as exc:
        error, oom_at = str(exc), exc.where or None
    _sync(device)
    wall_s = time.perf_counter() - start
    cuda_peak = None
    if device == "cuda":
        cuda_peak = torch.cuda.max_memory_allocated()
        # what the allocator held before the step that is no tensor the session counts (the
        # constants are counted; cuBLAS's workspace, for one, is not)
        outside -= sum(session.constant_bytes().values())
    return LiveRun(OK if error is None else OOM, int(budget_bytes), session.peak_bytes, session.evictions,
                   session.eager_evictions, session.replays, session.clock_ns, session.remat_ns,
                   overhead_of(OK if error is None else OOM, session.clock_ns, session.remat_ns),
                   tuple(session.evicted), step=number, engine=session.engine_name, error=error, oom_at=oom_at,
                   wall_s=wall_s,
                   unplanned_remats=session.unplanned_remats, early_bytes=session.early_bytes,
                   cuda_peak_bytes=cuda_peak,
                   cuda_outside_bytes=outside)


def simulate_plan(program, budget_bytes: int, policy: str, seed: int) -> SimRun:
    """The plan simulated with the same policy and budget on the eager-optimized runtime."""
    from ..sim.instruments import EVICT, REMAT, Instruments
    from ..sim.simulate import simulate

    result = simulate(program, budget_bytes, policy, DEFAULT_RUNTIME, seed=seed,
                      instruments=Instruments(per_storage=False, events=True, oom_snapshot=False))
    events = result.observations.events
    return SimRun(result.outcome, budget_bytes, result.peak_bytes, result.evictions, result.eager_evictions,
                  len(events.rows(REMAT)), result.clock_ns, result.remat_ns,
                  result.overhead, tuple(events.rows(EVICT).storage.tolist()),
                  runtime=result.runtime)


def checked_live_step(step: Callable[[], object], state, *args, **kwargs) -> LiveRun:
    """live_step, then (when it finished) a plain step from the state it started from, compared
    bitwise (live/check.py); the state is then the plain step's."""
    from . import check

    _drop_grads(step)
    before = check.snapshot(state)
    run = live_step(step, *args, **kwargs)
    result = None
    if run.outcome == OK:
        live = check.read(state)
        check.restore(before)
        step()
        result = check.compare(live, check.read(state)).to_dict()
    else:  # the step stopped: the next starts from the state this one started from
        check.restore(before)
    return replace(run, check=result)


def run_live(step: Callable[[], object], label: str, *, ratio: float | None, budget_bytes: int | None,
             policy: str, clock: str, steps: int, device: str, seed: int, compare_sim: bool,
             plan: TraceText | None = None, engine: str = "auto", check: bool = False) -> RunReport:
    """A warm-up step, PLAIN_REPEATS timed plain steps (their median), the plan (a capture of the step,
    written and read back, unless one is given), then `steps` budgeted live steps following it, and
    the plan's simulation. A ratio is of the plan's peak, as `dtrlab simulate` takes it. With
    `check`, each live step is compared with a plain step from the same state (checked_live_step)."""
    from ..capture.recorder import record
    from ..capture.save import to_text
    from ..sim.simulate import baseline, budget_of

    wall_seconds(step, device)  # warm-up: first runs pay for lazy initialization
    plain_wall_s = plain_seconds(step, device)
    if plan is None:
        plan = to_text(record(step, sync=torch.cuda.synchronize if device == "cuda" else None), label)
    followed = make_plan(plan)
    program = followed.program
    budget = budget_of(program, ratio, budget_bytes)
    if check:
        from .check import find_state

        state = find_state(step)
        runs = tuple(checked_live_step(step, state, budget, policy, clock, seed, device, followed, k + 1, engine)
                     for k in range(steps))
    else:
        runs = tuple(live_step(step, budget, policy, clock, seed, device, followed, k + 1, engine)
                     for k in range(steps))
    sim = simulate_plan(program, budget, policy, seed) if compare_sim else None
    return RunReport(plain_wall_s, baseline(program).peak_bytes, budget, runs, sim)
