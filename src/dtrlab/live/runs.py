"""`dtrlab run`'s work: a step run plainly, unbounded, captured, then K times under a budget, and
the simulation of the trace captured of the same step.

Owns the order of those runs and the figures of each (LiveRun, SimRun, RunReport); the CLI
(commands.py) only checks options and prints.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from ..defaults import DEFAULT_RUNTIME
from ..sim.result import OK, OOM
from .clocks import LOGICAL, Clock, MeasuredClock, TableClock, trace_costs
from .session import LiveBudgetError, LiveSession

PLAIN_REPEATS = 3  # the plain step's wall time is the median of this many, after a warm-up


def overhead_of(clock_ns: int, remat_ns: int) -> float | None:
    """The simulator's overhead on a live clock: final clock / compute, compute being the clock's
    first runs (it starts at 1, as the engine's: an unbounded step is (compute + 1) / compute)."""
    compute_ns = clock_ns - 1 - remat_ns
    return clock_ns / compute_ns if compute_ns > 0 else None


@dataclass(frozen=True)
class Figures:
    """What a run under a budget did, in the same terms live and simulated. outcome: ok or oom;
    remats: operators replayed (rerun); overhead: clock / compute (None for a run that did not finish)."""

    outcome: str
    budget_bytes: int
    peak_bytes: int
    evictions: int
    eager_evictions: int
    remats: int
    clock_ns: int
    remat_ns: int
    overhead: float | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LiveRun(Figures):
    """One step under a LiveSession. error: the LiveBudgetError's line of an oom (the figures are
    those of the step until then); wall_s: the step's wall time, pinning its outputs included;
    cuda_*: the CUDA allocator's own figures (None on CPU)."""

    step: int = 1
    error: str | None = None
    wall_s: float = 0.0
    cuda_peak_bytes: int | None = None
    cuda_outside_bytes: int | None = None


@dataclass(frozen=True)
class SimRun(Figures):
    """The simulation of the captured trace, in the same terms; remats are the engine's
    rematerializations (operators rerun), peak_bytes its trace's own accounting."""

    trace_peak_bytes: int = 0
    runtime: str = DEFAULT_RUNTIME


@dataclass(frozen=True)
class RunReport:
    """What `dtrlab run` measured: the plain step's wall time, the live unbounded peak (what a
    ratio is of), each budgeted step, and the simulation when asked for."""

    plain_wall_s: float
    unbounded_peak_bytes: int
    budget_bytes: int
    steps: tuple[LiveRun, ...]
    sim: SimRun | None


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(step: Callable[[], object], device: str) -> float:
    _sync(device)
    start = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - start


def _drop_grads(step) -> None:
    """Free the last step's gradients before a measured step (a zoo step exposes its model), so the
    allocator's figures start from the step's constants."""
    model = getattr(step, "model", None)
    if model is not None:
        model.zero_grad(set_to_none=True)
    gc.collect()


def live_step(step: Callable[[], object], budget_bytes: float, policy: str, clock: Clock, seed: int,
              device: str, number: int = 1) -> LiveRun:
    """One step under a fresh LiveSession (a session covers one step), its outputs pinned at the end
    as the trace format pins them."""
    _drop_grads(step)
    outside = None
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        outside = torch.cuda.memory_allocated()
    session = LiveSession(budget_bytes=budget_bytes, policy=policy, clock=clock, seed=seed)
    error = None
    start = time.perf_counter()
    try:
        with session:
            step()
        session.pin_outputs()
    except LiveBudgetError as exc:
        error = str(exc)
    _sync(device)
    wall_s = time.perf_counter() - start
    cuda_peak = None
    if device == "cuda":
        cuda_peak = torch.cuda.max_memory_allocated()
        # what the allocator held before the step that is no tensor the session counts (the
        # constants are counted; cuBLAS's workspace, for one, is not)
        outside -= sum(s.nbytes for s in session.storages() if s.constant)
    return LiveRun(OK if error is None else OOM, int(budget_bytes), session.peak_bytes, session.evictions,
                   session.eager_evictions, session.replays, session.clock_ns, session.remat_ns,
                   overhead_of(session.clock_ns, session.remat_ns) if error is None else None,
                   step=number, error=error, wall_s=wall_s, cuda_peak_bytes=cuda_peak, cuda_outside_bytes=outside)


def unbounded_peak(step: Callable[[], object]) -> int:
    """The live peak of one step with no budget (nothing is evicted; the clock does not matter)."""
    session = LiveSession()
    with session:
        step()
    session.pin_outputs()
    return session.peak_bytes


def simulate_capture(capture, label: str, ratio: float | None, budget_bytes: int | None, policy: str,
                     seed: int) -> SimRun:
    """The captured trace simulated with the same policy, at the same ratio of the trace's own peak
    (or the same bytes), on the eager-optimized runtime."""
    from ..capture.save import to_program
    from ..sim.instruments import REMAT, Instruments
    from ..sim.simulate import baseline, budget_of, simulate

    program = to_program(capture, label)
    budget = budget_of(program, ratio, budget_bytes)
    result = simulate(program, budget, policy, DEFAULT_RUNTIME, seed=seed,
                      instruments=Instruments(per_storage=False, events=True, oom_snapshot=False))
    remats = len(result.observations.events.rows(REMAT))
    return SimRun(result.outcome, budget, result.peak_bytes, result.evictions, result.eager_evictions, remats,
                  result.clock_ns, result.remat_ns, result.overhead if result.ok else None,
                  trace_peak_bytes=baseline(program).peak_bytes, runtime=result.runtime)


def run_live(step: Callable[[], object], label: str, *, ratio: float | None, budget_bytes: int | None,
             policy: str, clock: str, steps: int, device: str, seed: int, compare_sim: bool) -> RunReport:
    """A warm-up step, PLAIN_REPEATS timed plain steps (their median), an unbounded live step (the peak a ratio is of), a capture
    when the logical clock or the simulation needs one, then `steps` budgeted live steps."""
    from ..capture.recorder import record

    _timed(step, device)  # warm-up: first runs pay for lazy initialization
    plain_wall_s = statistics.median(_timed(step, device) for _ in range(PLAIN_REPEATS))
    peak = unbounded_peak(step)
    capture = None
    if clock == LOGICAL or compare_sim:
        capture = record(step, sync=torch.cuda.synchronize if device == "cuda" else None)
    budget = int(peak * ratio) if ratio is not None else budget_bytes
    table = trace_costs(capture) if clock == LOGICAL else None
    runs = tuple(live_step(step, budget, policy, TableClock(table) if table is not None else MeasuredClock(),
                           seed, device, k + 1) for k in range(steps))
    sim = simulate_capture(capture, label, ratio, budget_bytes, policy, seed) if compare_sim else None
    return RunReport(plain_wall_s, peak, budget, runs, sim)
