"""A worker: a child process that keeps its programs loaded and runs one RunSpec at a time.

The parent holds a Worker handle and kills the child when a run outlives its timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DtrlabError, UsageError
from ..sim.result import TIMEOUT, RunResult
from .grid import RunSpec

if TYPE_CHECKING:
    from ..optimal.solve import OptimalResult


# The signals that stop a sweep cleanly (what is stored stays, the summary is printed).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class Finished:
    """One run done: its spec, its result (outcome timeout when it was killed) and its wall time.
    A solve (policy optimal) gives an optimal.solve.OptimalResult, without its schedule."""

    spec: RunSpec
    result: RunResult | OptimalResult
    wall_s: float


def timeout_result(spec: RunSpec) -> RunResult:
    """The result of a run that was stopped: an outcome and nothing measured."""
    return RunResult(outcome=TIMEOUT, clock_ns=0, remat_ns=0, baseline_compute_ns=0,
                     baseline_peak_bytes=0, budget_bytes=spec.budget_bytes, evictions=0,
                     eager_evictions=0, distinct_evicted=0, peak_bytes=0, score_evals=0,
                     policy=spec.policy, runtime=spec.runtime, engine="", trace=spec.trace)


class WorkerDied(RuntimeError):
    """The child ended without answering (killed by the OS, out of memory, or a crash)."""


# --- the child side -------------------------------------------------------------------------


def _program(programs: dict, spec: RunSpec):
    """The spec's program, loaded once per (source, trace) and kept: loading is the slow part."""
    from ..sim.simulate import baseline
    from ..trace import load

    ident = (spec.source, spec.trace)
    program = programs.get(ident)
    if program is None:
        hits = [p for p in load(spec.source, [spec.trace], cache=True) if p.name == spec.trace]
        if not hits:
            raise UsageError(f"{spec.source}: no trace named {spec.trace!r}")
        program = programs[ident] = hits[0]
        baseline(program)  # computed here so that it never counts against a run's timeout
    if program.sha256 != spec.trace_sha256:
        raise UsageError(f"{spec.source}: trace {spec.trace} changed since the sweep was planned "
                         f"(sha256 {program.sha256[:12]}, expected {spec.trace_sha256[:12]})")
    return program


def _solve(program, spec: RunSpec):
    """The solver's answer at the spec's budget, without its schedule (the row keeps its figures; the
    schedule itself is `dtrlab optimal --schedule-out`'s)."""
    from dataclasses import replace

    from ..optimal.solve import solve

    return replace(solve(program, spec.budget_bytes, spec.solve), schedule=None)


def _keeping(keep):
    """The function a Keep names (imported by name: it lives in a layer above the sweep)."""
    import importlib

    module, _, name = keep.function.partition(":")
    return getattr(importlib.import_module(module), name)


def _watch_parent(parent_pid: int) -> None:
    """Exit when the parent is gone (kill -9 of a sweep): nobody is left to read our result."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(3)


def child_main(read_fd: int, write_fd: int, parent_pid: int) -> None:
    # Ctrl-C (and a SIGTERM sent to the process group) reach us too; the parent decides what
    # happens to us, and stores what is done first.
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    from ..sim.simulate import simulate

    programs: dict = {}
    while True:
        try:
            spec = inbox.recv()
        except EOFError:
            return
        try:
            program = _program(programs, spec)
            outbox.send(("started", None))
            t0 = time.perf_counter()
            if spec.solve is not None:
                result = _solve(program, spec)
            elif spec.keep is not None:
                result = _keeping(spec.keep)(program, spec, spec.keep.folder)
            else:
                result = simulate(program, spec.budget_bytes, spec.policy, spec.runtime,
                                  overhead_limit=spec.overhead_limit, seed=spec.seed, engine=spec.engine)
            outbox.send(("done", (result, time.perf_counter() - t0)))
        except DtrlabError as exc:
            outbox.send(("usage", str(exc)))
        except Exception:  # a bug: the parent raises it with this traceback
            outbox.send(("bug", traceback.format_exc()))


# --- the parent side ------------------------------------------------------------------------


def _child_env() -> dict[str, str]:
    # The child must import this very dtrlab, installed or not (a src checkout on PYTHONPATH).
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    # One worker a core already: numerical libraries' own thread pools would only compete.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    return env


class Worker:
    """A handle on one child process: send it a spec, wait for its answer, kill it on timeout."""

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dtrlab.sweep.worker", str(to_child_r), str(from_child_w),
                 str(os.getpid())],
                pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, env=_child_env())
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.outbox = Connection(to_child_w, readable=False)
        self.inbox = Connection(from_child_r, writable=False)
        self.spec: RunSpec | None = None
        self.deadline: float | None = None  # monotonic; set once the child has started the run
        self.timeout_s: float | None = None

    @property
    def busy(self) -> bool:
        return self.spec is not None

    def start(self, spec: RunSpec, timeout_s: float | None) -> None:
        self.spec, self.timeout_s, self.deadline = spec, timeout_s, None
        try:
            self.outbox.send(spec)
        except OSError:  # the child is gone already: most likely it could not import dtrlab
            code = self.process.wait()
            self.spec = None
            raise WorkerDied(f"a worker process exited at start (exit status {code}); can "
                             f"{sys.executable} import dtrlab?") from None

    def answer(self) -> Finished | None:
        """Read one message (the inbox is ready): None after 'started', a Finished at the end."""
        spec = self.spec
        try:
            kind, payload = self.inbox.recv()
        except (EOFError, OSError):
            code = self.process.wait()
            self.spec = None
            raise WorkerDied(f"a worker process died (exit status {code}) while running "
                             f"{spec.trace} {spec.policy} {spec.runtime} budget {spec.budget_bytes}") from None
        if kind == "started":
            if self.timeout_s is not None:
                self.deadline = time.monotonic() + self.timeout_s
            return None
        self.spec, self.deadline = None, None
        if kind == "done":
            result, wall_s = payload
            return Finished(spec, result, wall_s)
        if kind == "usage":
            raise UsageError(payload)
        raise RuntimeError(f"a worker failed on {spec}:\n{payload}")

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def kill(self) -> Finished | None:
        """Stop the child for good; the timeout of the run it had, if any."""
        spec = self.spec
        self.close(kill=True)
        return None if spec is None else Finished(spec, timeout_result(spec), float(self.timeout_s or 0))

    def close(self, kill: bool = False) -> None:
        for conn in (self.outbox, self.inbox):
            conn.close()  # an idle child reads EOF and exits
        if kill or self.spec is not None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a child stuck in a C call
            self.process.kill()
            self.process.wait()
        self.spec = None

    def run(self, spec: RunSpec, timeout_s: float | None) -> Finished:
        """Run one spec to the end, or kill the child at its deadline (the caller replaces it)."""
        from multiprocessing.connection import wait

        self.start(spec, timeout_s)
        while True:
            left = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            if wait([self.inbox], left):
                done = self.answer()
                if done is not None:
                    return done
            elif self.expired(time.monotonic()):
                return self.kill()


if __name__ == "__main__":
    child_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
