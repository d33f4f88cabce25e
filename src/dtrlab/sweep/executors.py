"""Executors by name: `local` (a pool of worker processes on this machine) and `dask` (a cluster).

Both stream Finished runs back as they complete and stop a run at its timeout by killing its process.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from multiprocessing.connection import wait
from typing import Iterable, Iterator

from ..errors import UsageError
from .grid import RunSpec
from .worker import Finished, Worker, WorkerDied


def default_workers() -> int:
    """One worker a core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _check_workers(workers: int | None) -> int:
    if workers is None:
        return default_workers()
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, got {workers}")
    return int(workers)


class LocalExecutor:
    """Worker processes on this machine, one a core by default, each keeping its programs loaded.

    A run past its timeout has its process killed and replaced; the rest keep going. A run whose
    process dies (killed by the OS, out of memory, a crash) is not stored: its reason is kept in
    `lost`, the process is replaced, and the rest keep going.
    """

    name = "local"

    def __init__(self, workers: int | None = None, scheduler: str | None = None) -> None:
        if scheduler is not None:
            raise UsageError("--scheduler is for --executor dask")
        self.workers = _check_workers(workers)
        self._pool: list[Worker] = []
        self.lost: list[str] = []  # why each run that died with its process was not stored

    def _feed(self, queue: deque, timeout_s: float | None) -> None:
        """Give every idle worker a spec, starting workers up to the pool size."""
        for w in self._pool:
            if not w.busy and queue:
                w.start(queue.popleft(), timeout_s)
        while queue and len(self._pool) < self.workers:
            w = Worker()
            self._pool.append(w)
            w.start(queue.popleft(), timeout_s)

    def run(self, specs: Iterable[RunSpec], timeout_s: float | None = None) -> Iterator[Finished]:
        queue = deque(specs)
        pool = self._pool
        try:
            while queue or any(w.busy for w in pool):
                self._feed(queue, timeout_s)
                busy = [w for w in pool if w.busy]
                deadlines = [w.deadline for w in busy if w.deadline is not None]
                left = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
                ready = set(wait([w.inbox for w in busy], left))
                finished = []
                for w in busy:
                    if w.inbox in ready:
                        try:
                            done = w.answer()
                        except WorkerDied as exc:
                            pool.remove(w)
                            w.close(kill=True)
                            self.lost.append(str(exc))
                            continue
                        if done is not None:
                            finished.append(done)
                now = time.monotonic()
                for w in busy:
                    if w.busy and w.expired(now):
                        pool.remove(w)
                        finished.append(w.kill())
                # Workers get their next spec before the caller stores these results, so that
                # storing (a commit each) overlaps with simulating instead of adding to it.
                self._feed(queue, timeout_s)
                yield from finished
        finally:
            self.close()

    def close(self) -> None:
        while self._pool:
            self._pool.pop().close()

    def __enter__(self) -> "LocalExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- Dask ------------------------------------------------------------------------------------
# A Dask task runs its spec in a Worker child of the Dask worker process, so that a timeout can
# kill it (a thread cannot be stopped) and programs stay loaded between tasks. The children
# of one process are pooled here: process-wide by nature, like a connection pool.

_pool_lock = threading.Lock()
_idle: list[Worker] = []
_live: set[Worker] = set()


def _run_remote(spec: RunSpec, timeout_s: float | None) -> Finished:
    with _pool_lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = Worker()
        with _pool_lock:
            _live.add(worker)
    try:
        done = worker.run(spec, timeout_s)
    except BaseException:
        with _pool_lock:
            _live.discard(worker)
        worker.close(kill=True)
        raise
    with _pool_lock:
        if worker.process.poll() is None and worker in _live:
            _idle.append(worker)
        else:  # killed at its timeout, or by _close_workers meanwhile
            _live.discard(worker)
    return done


def _close_workers(kill_busy: bool) -> int:
    """Close the idle children (and the busy ones too when asked); run on every Dask worker."""
    with _pool_lock:
        doomed = list(_live) if kill_busy else list(_idle)
        for w in doomed:
            _live.discard(w)
        _idle.clear()
    for w in doomed:
        w.close(kill=kill_busy)
    return len(doomed)


# How long to try reaching a --scheduler before saying it cannot be reached.
SCHEDULER_CONNECT_TIMEOUT_S = 10


class DaskExecutor:
    """A Dask cluster: the scheduler at `scheduler`, or a LocalCluster of `workers` workers.

    Every Dask worker must see the trace source at the same path and import the same dtrlab.
    """

    name = "dask"

    def __init__(self, workers: int | None = None, scheduler: str | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - a dependency of dtrlab
            raise UsageError("the dask executor needs dask[distributed] installed") from None
        self.cluster = None
        self.lost: list[str] = []  # as LocalExecutor's: runs whose process died, not stored
        if scheduler is not None:
            if workers is not None:
                raise UsageError("--workers starts a local Dask cluster; with --scheduler the cluster has its own")
            try:
                self.client = Client(scheduler, timeout=f"{SCHEDULER_CONNECT_TIMEOUT_S}s")
            except (OSError, TimeoutError, ValueError) as exc:
                raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
        else:
            # Threads are enough: each task waits on a child process that does the work.
            self.cluster = LocalCluster(n_workers=_check_workers(workers), threads_per_worker=1,
                                        processes=False, dashboard_address=None,
                                        silence_logs=logging.ERROR)
            self.client = Client(self.cluster)
        self.workers = sum(self.client.nthreads().values())
        if self.workers == 0:
            self.close()
            raise UsageError(f"the Dask scheduler at {scheduler} has no workers")

    def run(self, specs: Iterable[RunSpec], timeout_s: float | None = None) -> Iterator[Finished]:
        from distributed import as_completed

        pending = iter(specs)
        # A window of a few tasks a thread: enough to keep every worker fed, few enough that an
        # interrupted sweep leaves little queued on a shared cluster.
        window = 2 * self.workers
        futures = as_completed()
        submitted = []

        def submit(n: int) -> None:
            for spec in pending:
                future = self.client.submit(_run_remote, spec, timeout_s, pure=False)
                futures.add(future)
                submitted.append(future)
                n -= 1
                if n == 0:
                    return

        submit(window)
        try:
            for future in futures:
                try:
                    done = future.result()
                except WorkerDied as exc:  # raised in the Dask worker, re-raised here by Dask
                    self.lost.append(str(exc))
                else:
                    yield done
                submit(1)
        finally:
            self.client.cancel([f for f in submitted if not f.done()])

    def close(self) -> None:
        try:
            # Our own cluster dies with us, so its running children may be killed too; on a shared
            # cluster only our idle children go (their running ones may be another client's).
            self.client.run(_close_workers, self.cluster is not None)
        except Exception:  # pragma: no cover - a cluster already gone
            pass
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def __enter__(self) -> "DaskExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


EXECUTORS = {"local": LocalExecutor, "dask": DaskExecutor}
DEFAULT_EXECUTOR = "local"


def get_executor(name: str = DEFAULT_EXECUTOR, workers: int | None = None,
                 scheduler: str | None = None):
    """An executor by name, ready to `run(specs, timeout_s)`; close it (or use `with`) when done."""
    cls = EXECUTORS.get(name.strip().lower())
    if cls is None:
        raise UsageError(f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")
    return cls(workers=workers, scheduler=scheduler)
