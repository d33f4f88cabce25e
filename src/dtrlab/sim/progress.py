"""A long simulation is never silent: the engines' progress calls, what a watch says of them, and a
run ended early (Ctrl-C) with its partial figures.

Both engines call `progress(clock_ns, remat_ns, evictions, eager_evictions, ops_created, step)`
after every PROGRESS_EVERY units of work (a schedule step, a computation, a policy eviction; the
same units at the same points on both), so a callback that raises ends either run at the same place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .result import RunResult

# Units of work between two progress calls: a Python call per 4,096 units costs well under 1% of a
# run, and even at 40 us an eviction (a thrash) Ctrl-C and the watch are heard within 0.2 s.
PROGRESS_EVERY = 1 << 12
SILENT_S = 2.0  # a run says nothing before it has run this long
REPORT_EVERY_S = 2.0  # then a line at most this often
THRASH_OVERHEAD = 100.0  # overhead so far past this, and climbing: the run is said to thrash


class RunInterrupted(Exception):
    """A simulation ended before its end (Ctrl-C, or a progress callback that raised): `partial`
    holds its counters so far, with outcome "interrupted"; nothing of it is a finished run."""

    def __init__(self, partial: RunResult) -> None:
        super().__init__(f"interrupted at clock {partial.clock_ns} after {partial.evictions} evictions")
        self.partial = partial


@dataclass(frozen=True)
class Snapshot:
    """A run's figures so far, as a progress call gives them."""

    clock_ns: int
    remat_ns: int
    evictions: int
    eager_evictions: int
    ops_created: int
    step: int

    @property
    def overhead(self) -> float:
        """Time spent over the first computations' time so far (the clock starts at 1)."""
        first = self.clock_ns - self.remat_ns
        return self.clock_ns / first if first > 0 else 1.0


class RunWatch:
    """A progress callback that says how a run goes: nothing for its first SILENT_S seconds, then a
    line (clock, evictions, overhead so far, operators done) every REPORT_EVERY_S, and once, when
    the overhead so far passes THRASH_OVERHEAD and is still climbing, that the run thrashes and
    what stops it. `say` takes each progress line and `warn` the thrash line (default: say); `now`
    is the clock in seconds (injected in tests)."""

    def __init__(self, say: Callable[[str], None], n_ops: int, *, warn: Callable[[str], None] | None = None,
                 now: Callable[[], float] = time.monotonic, overhead_limit: float | None = None) -> None:
        self.say = say
        self.warn = warn or say
        self.n_ops = n_ops
        self.now = now
        self.overhead_limit = overhead_limit
        self.start_s = now()
        self.next_s = self.start_s + SILENT_S
        self.last: Snapshot | None = None
        self.thrash_said = False

    def __call__(self, clock_ns: int, remat_ns: int, evictions: int, eager_evictions: int, ops_created: int,
                 step: int) -> None:
        snap = Snapshot(clock_ns, remat_ns, evictions, eager_evictions, ops_created, step)
        prev, self.last = self.last, snap
        t = self.now()
        climbing = prev is not None and snap.overhead > prev.overhead
        if not self.thrash_said and snap.overhead > THRASH_OVERHEAD and climbing:
            self.thrash_said = True
            stop = ("--overhead-limit stops a run at the overhead it is given"
                    if self.overhead_limit is None else f"--overhead-limit {self.overhead_limit:g} will stop it")
            self.warn(f"thrashing: overhead {snap.overhead:,.0f}x so far and climbing, after "
                     f"{evictions:,} evictions; {stop}")
        if t >= self.next_s:
            self.next_s = t + REPORT_EVERY_S
            self.say(f"{t - self.start_s:.0f} s: {describe(snap)}, operator {ops_created:,} of {self.n_ops:,}")


def describe(snap: Snapshot) -> str:
    """The figures of a run so far, in one line."""
    return (f"clock {snap.clock_ns / 1e6:,.1f} ms, {snap.evictions:,} evictions, "
            f"overhead {snap.overhead:,.2f}x so far")


__all__ = ["PROGRESS_EVERY", "RunInterrupted", "RunWatch", "Snapshot", "describe"]
