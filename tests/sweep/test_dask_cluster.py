"""A real Dask cluster of processes on 127.0.0.1 (a scheduler and two workers, each its own process,
started as `dask scheduler` / `dask worker` are): `--scheduler tcp://...` gives the local executor's
rows, row for row, through the real CLI."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

from conftest import cli_invoke
from dtrlab.sweep.store import results_dataframe
from sweep_helpers import TRACES, needs_shared, result_rows

pytestmark = needs_shared
RATIOS = "0.15:0.30:0.05"
ARGS = ["--trace", "resnet32", "--ratios", RATIOS, "--policy", "dtr", "--policy", "msps", "--no-progress"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dask(*args: str, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    # Processes of their own: a cluster's scheduler and workers are what the test is about.
    return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=subprocess.DEVNULL,
                            stderr=stderr, env=os.environ.copy(), text=True)


def _await_line(proc: subprocess.Popen, text: str) -> None:
    """Read the process's log (stderr) until a line holds `text`, then drain the rest in a thread, so
    that the process never blocks on a full pipe."""
    for line in proc.stderr:
        if text in line:
            threading.Thread(target=shutil.copyfileobj, args=(proc.stderr, open(os.devnull, "w")),
                             daemon=True).start()
            return
    raise RuntimeError(f"`dask {proc.args[3]}` ended (exit status {proc.wait()}) before logging {text!r}")


@pytest.fixture
def cluster():
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    from distributed import Client

    procs = [_dask("scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard",
                   stderr=subprocess.PIPE)]
    client = None
    try:
        _await_line(procs[0], "Scheduler at:")  # it logs this once it listens
        client = Client(address, timeout="60s")
        procs += [_dask("worker", address, "--nthreads", "1", "--no-dashboard", "--name", f"w{i}")
                  for i in range(2)]
        client.wait_for_workers(2, timeout=60)
        assert len(client.nthreads()) == 2
        yield address, client
    finally:
        if client is not None:
            client.close()
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def _tasks_done(client) -> int:
    """How many runs the scheduler saw finish on its workers (tasks are named by their function,
    the leading underscore dropped; a finished task has passed through the state "memory")."""
    def count(dask_scheduler):
        prefix = dask_scheduler.task_prefixes.get("run_remote")
        return 0 if prefix is None else prefix.state_counts["memory"]

    return client.run_on_scheduler(count)


@pytest.mark.slow
def test_a_cluster_of_processes_gives_the_local_rows(cluster, tmp_path):
    address, client = cluster
    local, remote = tmp_path / "local.duckdb", tmp_path / "remote.duckdb"
    cli_invoke("sweep", TRACES, *ARGS, "--store", local, "--workers", "2", check=True)
    cli_invoke("sweep", TRACES, *ARGS, "--store", remote, "--executor", "dask", "--scheduler", address, check=True)
    rows = result_rows(results_dataframe(remote))
    assert len(rows) == 8
    assert rows == result_rows(results_dataframe(local))
    assert _tasks_done(client) == 8  # the runs ran on the cluster's workers
