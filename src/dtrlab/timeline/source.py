"""The one event source of every timeline: a run with its event log, cut to a window of the clock,
and the (re)materialization frames the log's rows close, with the clock each one opened at.

Owns Timeline (a frozen value), recording one, --window START:END, and the frames' spans.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME
from ..errors import UsageError
from ..formats import overhead_text
from ..sim.instruments import COMPUTE, EVENT_KINDS, REMAT, Instruments, OomSnapshot
from ..sim.result import RunResult
from ..trace.lower import Program

# The engines' clock starts here (the reference's does), so the first frame opens at 1 ns.
START_CLOCK_NS = 1


@dataclass(frozen=True)
class Window:
    """A stretch of the simulated clock, both ends included (ns)."""

    start_ns: int
    end_ns: int

    @property
    def label(self) -> str:
        return f"{self.start_ns}:{self.end_ns}"


def parse_window(text: str | None) -> Window | None:
    """`START:END` in ns of the simulated clock (whole numbers, START <= END), or None for all."""
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--window {text!r}: expected START:END, whole numbers of ns of the simulated clock")
    start, end = (int(p) for p in parts)
    if start > end:
        raise UsageError(f"--window {text!r}: START must not be after END")
    return Window(start, end)


@dataclass(frozen=True, eq=False)
class Timeline:
    """One run and everything a timeline writer reads: the program, the result (its counters), the
    budget, the event log (result.observations.events) and the window the writers keep."""

    program: Program
    result: RunResult
    budget_bytes: int
    ratio: float | None
    window: Window | None = None

    @property
    def log(self):
        return self.result.observations.events

    @property
    def oom(self) -> OomSnapshot | None:
        return self.result.observations.oom

    @property
    def title(self) -> str:
        r = self.result
        budget = f"ratio {self.ratio:g}" if self.ratio is not None else f"{self.budget_bytes:,} B"
        return f"{self.program.name} {r.policy}/{r.runtime} at {budget}: {r.outcome}, overhead {overhead_text(r.overhead, 4)}"

    def kept(self) -> np.ndarray:
        """A boolean mask of the log rows inside the window (every row without one)."""
        clock = self.log.clock_ns
        if self.window is None:
            return np.ones(len(clock), bool)
        return (clock >= self.window.start_ns) & (clock <= self.window.end_ns)

    def cut(self, window: Window | None) -> "Timeline":
        return replace(self, window=window)


def record(program: Program, budget_bytes: int, policy: str = DEFAULT_POLICY, runtime: str = DEFAULT_RUNTIME,
           ratio: float | None = None, seed: int = 0, engine: str = "auto") -> Timeline:
    """Simulate one run with the event log on (whichever engine supports it) and keep it."""
    from ..sim.simulate import simulate

    result = simulate(program, budget_bytes, policy, runtime, seed=seed, engine=engine,
                      instruments=Instruments(per_storage=False, events=True, oom_snapshot=True))
    return Timeline(program, result, int(budget_bytes), ratio)


@dataclass(frozen=True)
class Frames:
    """The compute/remat rows of a log as frames of the (re)materialization stack.

    row: the log row that closes each frame (its operator ran), in log order; opened_ns: the clock
    when the engine pushed it, which is when the last earlier frame at its depth or shallower closed
    (the engine pushes a frame, then its missing inputs' frames, and computes only when those are
    done; evictions and locks take no time); opened_after: that earlier frame's log row (-1: none).
    """

    row: np.ndarray
    opened_ns: np.ndarray
    opened_after: np.ndarray


def frames(log) -> Frames:
    """The frames of every compute and rematerialization row of `log` (the whole log: a frame's
    opening may lie before a window)."""
    kinds = (EVENT_KINDS[COMPUTE], EVENT_KINDS[REMAT])
    rows = np.flatnonzero(np.isin(log.kind, kinds))
    depth, clock = log.depth[rows].tolist(), log.clock_ns[rows].tolist()
    opened = np.empty(len(rows), np.int64)
    after = np.empty(len(rows), np.int64)
    stack: list[int] = []  # frames (indices into rows) whose depth rises strictly, top last
    row_list = rows.tolist()
    for i, d in enumerate(depth):
        # The nearest earlier frame no deeper than this one: a monotonic stack, linear in all.
        while stack and depth[stack[-1]] > d:
            stack.pop()
        if stack:
            j = stack[-1]
            opened[i], after[i] = clock[j], row_list[j]
        else:
            opened[i], after[i] = START_CLOCK_NS, -1
        stack.append(i)
    return Frames(rows, opened, after)
