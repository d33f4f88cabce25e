"""The report's analyses on worker processes: each task lands its result in the report's memo, so
nothing comes back but its completion.

Owns `run_tasks` (spawned processes, not forked: the report's process holds the store's threads and
the progress bar's) and what a worker takes once, at its start: the programs (`program`) and the
formula policies the report's process registered by name.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable

from ..sim.policies import register_policy, registered_formulas
from ..trace.lower import Program

_PROGRAMS: dict[str, Program] = {}  # a worker's programs, by sha256


@dataclass(frozen=True)
class Task:
    """fn(*args) on a worker: fn a module-level function, args picklable (a program by its sha256,
    read there with `program`); `what` names it in the progress line."""

    fn: Callable
    args: tuple
    what: str


def program(sha256: str) -> Program:
    """A program of the running tasks, by its sha256."""
    return _PROGRAMS[sha256]


def _init(programs: dict[str, Program], policies: dict[str, tuple[str, str]] | None = None) -> None:
    _PROGRAMS.update(programs)
    for name, (text, description) in (policies or {}).items():  # the parent's own named formulas
        register_policy(name, text, description=description, replace=True)


def _call(fn: Callable, args: tuple) -> None:
    fn(*args)


def run_tasks(tasks: list[Task], programs: dict[str, Program], workers: int | None,
              tick: Callable[[str], None] = lambda _what: None) -> None:
    """Run every task, in the given order (put the longest first), on up to `workers` processes (default:
    one a core), or in this process for one worker or one task; tick(what) after each."""
    workers = min(workers or len(os.sched_getaffinity(0)), len(tasks))
    if workers <= 1:
        _init(programs)
        try:
            for task in tasks:
                task.fn(*task.args)
                tick(task.what)
        finally:
            _PROGRAMS.clear()
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init,
                             initargs=(programs, registered_formulas())) as pool:
        futures = {pool.submit(_call, task.fn, task.args): task for task in tasks}
        for done in as_completed(futures):
            done.result()
            tick(futures[done].what)
