"""Running a sweep: skip what the store has, run the rest on an executor, store each run as it ends.

Also the progress bar, the summary by trace and policy, and rounds of budget refinement.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table
from rich.text import Text

from ..errors import UsageError
from ..formats import overhead_text
from ..output import Ticker, console
from ..sim.policies import get_policy, is_import_path
from ..sim.result import OK, OOM, REMAT_LIMIT, TIMEOUT
from ..sim.simulate import budget_from_ratio
from ..trace.lower import Program
from .executors import DEFAULT_EXECUTOR, get_executor
from .grid import Point, RunSpec, refine
from .store import Store
from .worker import STOP_SIGNALS

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class SummaryRow:
    """The runs of one trace, policy and runtime: counts by outcome and the overheads of those ok."""

    trace: str
    policy: str
    runtime: str
    ok: int
    oom: int
    remat_limit: int
    timeout: int
    min_overhead: float | None
    max_overhead: float | None


@dataclass(frozen=True)
class SweepSummary:
    total: int  # distinct runs asked for
    skipped: int  # already in the store
    ran: int  # finished and stored by this call
    missing: int  # asked for but not stored (interrupted)
    wall_s: float
    stop_signal: int | None  # the signal that stopped it early (SIGINT for Ctrl-C), None if none
    rows: tuple[SummaryRow, ...]
    lost: tuple[str, ...] = ()  # why each run whose worker process died was not stored

    @property
    def interrupted(self) -> bool:
        return self.stop_signal is not None

    @property
    def runs_per_s(self) -> float:
        return self.ran / self.wall_s if self.wall_s > 0 else float("nan")


class _RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- runs/s" if speed is None else f"{speed:.2f} runs/s", style="progress.data.speed")


def _progress(console: Console, show: bool) -> Progress:
    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                    MofNCompleteColumn(), _RateColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                    TimeRemainingColumn(), console=console, transient=False,
                    disable=not (show and console.is_terminal))  # a log gets output.Ticker's lines


def _which(spec: RunSpec) -> str:
    at = f"{spec.ratio:g}" if spec.ratio is not None else f"{spec.budget_bytes:,} B"
    return f"{spec.trace} {spec.policy} at {at}"


def _todo(specs: Sequence[RunSpec], store: Store, timeout_s: float | None) -> list[RunSpec]:
    done = store.keys()
    # A timeout is worth another try only with more time than it had.
    retry = {k for k, t in store.timed_out().items()
             if timeout_s is None or t is None or timeout_s > t}
    return [s for s in specs if s.key not in done or s.key in retry]


def summarize(store: Store, specs: Iterable[RunSpec]) -> tuple[SummaryRow, ...]:
    frame = store.rows(s.key for s in specs)
    rows = []
    for (trace, policy, runtime), g in frame.groupby(["trace", "policy", "runtime"], sort=True):
        counts = g["outcome"].value_counts()
        ok = g.loc[g["outcome"] == OK, "overhead"]
        rows.append(SummaryRow(trace, policy, runtime, int(counts.get(OK, 0)), int(counts.get(OOM, 0)),
                               int(counts.get(REMAT_LIMIT, 0)), int(counts.get(TIMEOUT, 0)),
                               float(ok.min()) if len(ok) else None, float(ok.max()) if len(ok) else None))
    return tuple(rows)


def summary_table(summary: SweepSummary) -> Table:
    table = Table(title=f"{summary.total} runs: {summary.ran} run now, {summary.skipped} already stored"
                        + (f", {summary.missing} not run (interrupted)" if summary.missing else ""))
    for name in ("trace", "policy", "runtime", "ok", "oom", "remat_limit", "timeout",
                 "min overhead", "max overhead"):
        table.add_column(name, justify="left" if name in ("trace", "policy", "runtime") else "right")
    for r in summary.rows:
        table.add_row(r.trace, r.policy, r.runtime, str(r.ok), str(r.oom), str(r.remat_limit),
                      str(r.timeout), overhead_text(r.min_overhead, 4), overhead_text(r.max_overhead, 4))
    return table


class _Stopped(KeyboardInterrupt):
    """A stop signal, raised where Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _StopSignals:
    """While a sweep runs, SIGINT and SIGTERM stop it; one that arrives while a result is being
    stored waits until it is stored and counted, so that the summary counts what the store has."""

    def __init__(self) -> None:
        self.holding = False
        self.pending: int | None = None

    def _handle(self, signum, frame) -> None:
        if self.holding:
            self.pending = signum
        else:
            raise _Stopped(signum)

    @contextmanager
    def installed(self) -> Iterator["_StopSignals"]:
        # Only the main thread receives signals; elsewhere Ctrl-C stays a KeyboardInterrupt.
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    @contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending is not None:
            raise _Stopped(self.pending)


def interrupted_exit_status(stop_signal: int) -> int:
    """The shell's convention for a process stopped by a signal: 128 + its number (Ctrl-C: 130)."""
    return 128 + stop_signal


def interrupted_message(summary: SweepSummary) -> str:
    how = "" if summary.stop_signal == signal.SIGINT else f" ({signal.Signals(summary.stop_signal).name})"
    return f"interrupted{how}: {summary.ran} runs stored this time; run the same command again to finish"


def _check_rebuildable(specs: Sequence[RunSpec]) -> None:
    """Workers are other processes: a policy that is a Python function registered here is unknown
    there (and its rows could not be told from another function's under the same name)."""
    for name in dict.fromkeys(s.policy for s in specs if s.solve is None):
        if get_policy(name).formula is None and not is_import_path(name):
            raise UsageError(f"policy {name!r} is a Python function registered in this process, which a "
                             "sweep's worker processes cannot see: write it as a formula (--policy "
                             "'score: ...', see docs/policies.md) or name it by its import path "
                             "(--policy module:function, the module on PYTHONPATH)")


def run_sweep(specs: Iterable[RunSpec], store: Store | str | os.PathLike, executor=DEFAULT_EXECUTOR,
              workers: int | None = None, scheduler: str | None = None, timeout_s: float | None = None,
              progress: bool = True, *, report: bool | None = None) -> SweepSummary:
    """Run every spec the store lacks and store each result the moment it arrives.

    `executor` is a name (`workers` and `scheduler` configure it) or an executor already open.
    A killed sweep loses only the runs in flight: run it again to finish. Ctrl-C or SIGTERM stops
    it cleanly and returns a summary with `stop_signal` set. `report` (default: `progress`)
    prints the summary table at the end.
    """
    if timeout_s is not None and not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout_s}")
    unique: dict[str, RunSpec] = {}
    for s in specs:
        unique.setdefault(s.key, s)
    specs = list(unique.values())
    _check_rebuildable(specs)
    # The executor before the store: a scheduler that cannot be reached leaves no new file behind.
    named = isinstance(executor, str)
    ex_context = get_executor(executor, workers, scheduler) if named else nullcontext(executor)
    err = console(stderr=True)
    stop_signal = None
    finished: set[str] = set()
    todo: list[RunSpec] = []
    t0 = time.perf_counter()
    with ex_context as ex, (nullcontext(store) if isinstance(store, Store) else Store(store)) as opened:
        todo = _todo(specs, opened, timeout_s)
        lost_before = len(getattr(ex, "lost", ()))  # an executor may serve several calls
        if todo:
            what = f"sweep ({ex.workers} {ex.name} workers)"
            with _progress(err, progress) as bar, Ticker(err, what, len(todo), bar=False) as lines:
                task = bar.add_task(what, total=len(todo))
                try:
                    with _StopSignals().installed() as stops:
                        for done in ex.run(todo, timeout_s):
                            with stops.held():
                                opened.put(done.spec, done.result, done.wall_s, timeout_s=timeout_s)
                                finished.add(done.spec.key)
                            bar.advance(task)
                            if progress:
                                lines.tick(_which(done.spec))
                except _Stopped as stop:
                    stop_signal = stop.signum
                except KeyboardInterrupt:
                    stop_signal = signal.SIGINT
        wall_s = time.perf_counter() - t0
        summary = SweepSummary(total=len(specs), skipped=len(specs) - len(todo), ran=len(finished),
                               missing=sum(1 for s in todo if s.key not in finished), wall_s=wall_s,
                               stop_signal=stop_signal, rows=summarize(opened, specs),
                               lost=tuple(getattr(ex, "lost", ())[lost_before:]))
    if report if report is not None else progress:
        console().print(summary_table(summary))
    if summary.interrupted and progress:
        err.print(interrupted_message(summary))
    if summary.lost and progress:
        for reason in summary.lost:
            err.print(f"lost: {reason}", markup=False, highlight=False)
        err.print(f"{len(summary.lost)} runs not stored because their worker process died; "
                  "run the same command again to retry them", markup=False, highlight=False)
    return summary


def refine_specs(specs: Sequence[RunSpec], store: Store, programs: Mapping[str, Program], k: int,
                 factor: float) -> list[RunSpec]:
    """One round of refinement: for each curve (same trace, policy, runtime, options), k new
    ratios between stored neighbours whose outcomes differ or whose overheads differ by more
    than `factor`. `programs` maps trace sha256 to Program, to turn ratios into bytes."""
    if k < 1:
        raise UsageError(f"--refine must be at least 1, got {k}")
    frame = store.rows(s.key for s in specs).set_index("key")
    curves: dict[tuple, list[RunSpec]] = defaultdict(list)
    for s in specs:
        if s.ratio is not None and s.key in frame.index:
            curves[s.group].append(s)
    have = {s.key for s in specs}
    new: dict[str, RunSpec] = {}
    for members in curves.values():
        points = []
        for s in members:
            outcome, overhead = frame.loc[s.key, ["outcome", "overhead"]]
            points.append(Point(s.ratio, outcome, None if overhead is None or overhead != overhead else float(overhead)))
        proto = members[0]
        program = programs[proto.trace_sha256]
        for ratio in refine(points, k, factor):
            spec = replace(proto, budget_bytes=budget_from_ratio(program, ratio), ratio=ratio)
            if spec.key not in have:
                new.setdefault(spec.key, spec)
    return sorted(new.values(), key=lambda s: (s.trace, s.policy, s.runtime, s.budget_bytes))


@dataclass(frozen=True)
class Refinement:
    """What rounds of refinement added: specs (the given ones, then each round's new ones, in order),
    the number of runs simulated, and the last round's sweep summary (None if no round added any)."""

    specs: tuple[RunSpec, ...]
    ran: int
    summary: SweepSummary | None


def refine_rounds(specs: Sequence[RunSpec], store: Store, programs: Mapping[str, Program], k: int,
                  factor: float, rounds: int, sweep: Callable[[list[RunSpec], list[RunSpec]], SweepSummary],
                  announce: Callable[[int, int], None] | None = None) -> Refinement:
    """Up to `rounds` rounds of refine_specs over every spec so far; each round's new specs are run
    by `sweep(all specs so far, new specs)`, which returns its summary. Stops at a round that adds
    nothing or a sweep that was interrupted. `announce(round, n_new)` is told of each round first.
    The one refinement loop: `dtrlab sweep --refine` and `dtrlab reproduce` both run this."""
    specs, ran, summary = list(specs), 0, None
    for round_ in range(rounds):
        new = refine_specs(specs, store, programs, k, factor)
        if not new:
            break
        if announce is not None:
            announce(round_ + 1, len(new))
        specs += new
        summary = sweep(specs, new)
        ran += summary.ran
        if summary.interrupted:
            break
    return Refinement(tuple(specs), ran, summary)


__all__ = ["Refinement", "SummaryRow", "SweepSummary", "interrupted_exit_status", "refine_rounds", "refine_specs",
           "run_sweep", "summarize", "summary_table"]
