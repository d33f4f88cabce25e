"""Faults of the results store and of a sweep's ending: nothing stored is lost, each fault is one line.

A real store left by kill -9 (runs in its write-ahead log), then damaged the ways disks and people
damage files; `sweep`, `scan` and `results export` must each exit 2 with one line that names the
damage and a way out, and leave the bytes of the file and of its log as they were.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from conftest import cli_invoke
from dtrlab.sweep import executors
from dtrlab.sweep.run import run_sweep
from dtrlab.sweep.store import SCHEMA_VERSION, Store, results_dataframe, wal_path
from dtrlab.sweep.wal import wal_layout
from sweep_helpers import TRACES, needs_shared, oracle, resnet_specs

pytestmark = needs_shared
SRC = Path(__file__).resolve().parents[2] / "src"
RUNS = 60
CHECKPOINTED = 30  # runs 0..29 are in the main file, 30..59 only in the log

KILLED = """
import signal, sys
from dtrlab.sweep.grid import build_specs
from dtrlab.sweep.store import Store
from dtrlab.sweep.worker import timeout_result
from dtrlab.trace import load

source, path, runs, checkpointed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
specs = build_specs(source, load(source, ["resnet32"], cache=False), ["dtr"], ["eager-optimized"],
                    [round(0.1 + i / 1000, 3) for i in range(runs)])
store = Store(path)
for i, spec in enumerate(specs):
    store.put(spec, timeout_result(spec), 0.1, timeout_s=1.0)
    if i + 1 == checkpointed:
        store._con.execute("CHECKPOINT")
print("committed", flush=True)
signal.pause()
"""


def _killed_store(folder: Path) -> Path:
    """A store whose writer was killed with SIGKILL after committing RUNS runs."""
    script = folder / "killed.py"
    script.write_text(KILLED)
    path = folder / "killed.duckdb"
    # A process of its own: only a real SIGKILL leaves a store as a killed writer does.
    proc = subprocess.Popen([sys.executable, str(script), str(TRACES), str(path), str(RUNS), str(CHECKPOINTED)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(SRC)))
    assert proc.stdout.readline().strip() == "committed"
    proc.kill()
    proc.wait()
    proc.stdout.close()
    return path


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    path = _killed_store(tmp_path_factory.mktemp("killed"))
    assert wal_path(path).stat().st_size > 0
    return path


@pytest.fixture(scope="module")
def expected_keys():
    return [s.key for s in resnet_specs([round(0.1 + i / 1000, 3) for i in range(RUNS)])]


def _copy(store: Path, folder: Path) -> Path:
    target = folder / "store.duckdb"
    shutil.copyfile(store, target)
    if wal_path(store).exists():
        shutil.copyfile(wal_path(store), wal_path(target))
    return target


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_a_killed_store_keeps_every_committed_run_in_its_log(killed, expected_keys, tmp_path):
    path = _copy(killed, tmp_path)
    before = _digests(tmp_path)
    with Store(path, read_only=True) as store:  # reads the log without touching either file
        assert sorted(store.keys()) == sorted(expected_keys)
    assert _digests(tmp_path) == before
    layout = wal_layout(wal_path(path).read_bytes())
    assert layout is not None and layout.whole
    with Store(path) as store:  # a writable open replays the whole log into the file
        assert len(store) == RUNS
    assert not wal_path(path).exists()
    assert sorted(results_dataframe(path)["key"]) == sorted(expected_keys)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def _entry_starts(path: Path) -> tuple[int, ...]:
    ends = wal_layout(wal_path(path).read_bytes()).ends
    return ends[:-1]


def _log_checksum(path):  # a bit of an entry's payload: DuckDB's checksum of it fails
    _flip(wal_path(path), _entry_starts(path)[len(_entry_starts(path)) // 2] + 20)


def _log_size_field(path):  # an entry's size field: DuckDB alone takes it for a torn end and drops the rest
    _flip(wal_path(path), _entry_starts(path)[len(_entry_starts(path)) // 2] + 6)


def _log_cut(path):  # a log cut inside an entry, with whole entries after the cut lost
    log = wal_path(path)
    log.write_bytes(log.read_bytes()[:_entry_starts(path)[len(_entry_starts(path)) // 2] + 9])


def _recovered(path):
    Store(path).close()  # replay the log into the file: a store without a log, as after a clean exit
    assert not wal_path(path).exists()


def _file_header(path):
    _recovered(path)
    _flip(path, 100)


def _file_block(path):  # the first block after the headers holds the catalogue
    _recovered(path)
    _flip(path, 3 * 4096 + 100)


def _file_cut(path):
    _recovered(path)
    with open(path, "r+b") as f:
        f.truncate(3 * 4096 + 262144)


def _not_duckdb(path):
    wal_path(path).unlink()
    path.write_bytes(b"run,overhead\n0.1,2.5\n" * 500)


def _foreign(path):
    wal_path(path).unlink()
    path.unlink()
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs (key VARCHAR, overhead DOUBLE)")
    con.close()


def _newer_schema(path):
    _recovered(path)
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET schema_version = ?", [SCHEMA_VERSION + 1])
    con.close()


LOG_DAMAGE = ("write-ahead log store.duckdb.wal is damaged", "both files were left as they are",
              "dtrlab results salvage --store")
FILE_DAMAGE = ("the results store is damaged", "left as it is", "Restore it from a backup")
FAULTS = {
    "log-checksum": (_log_checksum, LOG_DAMAGE + ("does not match stored checksum",)),
    "log-size-field": (_log_size_field, LOG_DAMAGE + ("entries stop at byte", "DuckDB would drop the rest")),
    "log-cut": (_log_cut, LOG_DAMAGE + ("entries stop at byte",)),
    "file-header-flipped": (_file_header, FILE_DAMAGE + ("Corrupt database file", "block at location 0")),
    "file-block-flipped": (_file_block, FILE_DAMAGE + ("Corrupt database file", "block at location 12288")),
    "file-cut": (_file_cut, FILE_DAMAGE + ("Could not read enough bytes",)),
    "not-duckdb": (_not_duckdb, ("not a dtrlab results store (not a DuckDB file)", "pick another --store")),
    "foreign": (_foreign, ("a DuckDB file but not a dtrlab results store", "pick another --store")),
    "newer-schema": (_newer_schema, ("written by a newer dtrlab", f"schema {SCHEMA_VERSION + 1}", "a new --store")),
}
COMMANDS = {
    "sweep": lambda store: ["sweep", TRACES, "-t", "resnet32", "--ratios", "0.3", "--store", store, "--no-progress"],
    "scan": lambda store: ["scan", TRACES, "--trace", "resnet32", "--ratios", "0.3", "--store", store, "--json"],
    "export": lambda store: ["results", "export", "--store", store, "--format", "csv"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_damaged_store_is_one_line_and_left_as_it_was(killed, tmp_path, fault, command):
    path = _copy(killed, tmp_path)
    damage, words = FAULTS[fault]
    damage(path)
    before = _digests(tmp_path)
    result = cli_invoke(*COMMANDS[command](path))
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dtrlab: {path}: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert result.stdout == ""
    assert _digests(tmp_path) == before  # the file and its log: same names, same bytes


def _keys_of_log_head(store: Path, log: bytes, cut: int, folder: Path) -> set[str]:
    """The oracle: plain DuckDB, read-only, on a copy whose log is cut at `cut`."""
    folder.mkdir()
    copy = folder / "head.duckdb"
    shutil.copyfile(store, copy)
    wal_path(copy).write_bytes(log[:cut])
    con = duckdb.connect(str(copy), read_only=True)
    try:
        return {row[0] for row in con.execute("SELECT key FROM runs").fetchall()}
    finally:
        con.close()


def test_salvage_copies_every_run_before_the_damage_into_a_new_store(killed, expected_keys, tmp_path):
    (tmp_path / "damaged").mkdir()
    path = _copy(killed, tmp_path / "damaged")
    pristine_log = wal_path(path).read_bytes()
    pristine = results_dataframe(path).set_index("key")
    starts = _entry_starts(path)
    damaged_entry = starts[len(starts) // 2]
    _log_checksum(path)
    before = _digests(path.parent)

    out = tmp_path / "saved.duckdb"
    result = cli_invoke("results", "salvage", "--store", str(path), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert _digests(path.parent) == before and not wal_path(out).exists()

    wanted = _keys_of_log_head(path, pristine_log, damaged_entry, tmp_path / "oracle")
    assert set(expected_keys[:CHECKPOINTED]) < wanted < set(expected_keys)
    saved = results_dataframe(out).set_index("key")
    assert set(saved.index) == wanted
    assert f"{len(wanted)} runs written to {out}" in result.stderr
    columns = ["trace", "policy", "budget_bytes", "outcome", "timeout_s", "created_at"]
    pd.testing.assert_frame_equal(saved.sort_index()[columns], pristine.loc[sorted(wanted), columns])
    with Store(out) as store:  # a whole store again: a sweep can go on in it
        assert len(store) == len(wanted)

    again = cli_invoke("results", "salvage", "--store", str(path), "--out", str(out))
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_export_out_mistakes_are_one_line_and_leave_no_file(killed, tmp_path):
    path = _copy(killed, tmp_path)
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    (tmp_path / "folder").mkdir()
    cases = {tmp_path / "folder": "is a folder", tmp_path / "notes.txt" / "out.parquet": "is not a folder",
             tmp_path / "missing" / "out.parquet": "does not exist"}
    before = _digests(tmp_path)
    for out, words in cases.items():
        result = cli_invoke("results", "export", "--store", str(path), "--format", "parquet",
                            "--out", str(out))
        assert result.exit_code == 2 and words in result.stderr and len(result.stderr.splitlines()) == 1, result.output
    assert _digests(tmp_path) == before and sorted(p.name for p in (tmp_path / "folder").iterdir()) == []


def test_an_export_that_fails_midway_leaves_the_old_file_and_no_partial(killed, tmp_path, monkeypatch):
    path = _copy(killed, tmp_path)
    out = tmp_path / "results.csv"
    out.write_text("the previous export\n")

    def half_then_full_disk(self, target, **kwargs):
        Path(target).write_text("trace,policy\nresnet32,")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_full_disk)
    result = cli_invoke("results", "export", "--store", str(path), "--format", "csv", "--out", str(out))
    assert result.exit_code == 2 and "No space left on device" in result.stderr, result.output
    assert out.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "store.duckdb", "store.duckdb.wal"]


@pytest.mark.slow
def test_an_unreachable_scheduler_is_one_line_and_makes_no_store(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(executors, "SCHEDULER_CONNECT_TIMEOUT_S", 1)
    store = tmp_path / "new.duckdb"
    result = cli_invoke("sweep", str(TRACES), "-t", "resnet32", "--ratios", "0.3", "--store", str(store),
                        "--executor", "dask", "--scheduler", f"tcp://127.0.0.1:{port}", "--no-progress")
    assert result.exit_code == 2, result.output
    assert "cannot reach the Dask scheduler" in result.stderr and len(result.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


SAY_STORED = """
import sys
from dtrlab.sweep import store
put = store.Store.put
def put_and_say(self, *args, **kwargs):
    put(self, *args, **kwargs)
    print("stored", file=sys.stderr, flush=True)
store.Store.put = put_and_say
from dtrlab.cli import main
main(sys.argv[1:])
"""
SLOW_RATIOS = [round(0.1 + 0.01 * i, 2) for i in range(11)]


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_keeps_what_is_stored_and_says_so(tmp_path, stop):
    """Ctrl-C (SIGINT) and SIGTERM alike: the runs stored stay, the summary and the message are
    printed, and the exit status is 128 + the signal's number."""
    script = tmp_path / "say.py"
    script.write_text(SAY_STORED)
    path = tmp_path / "term.duckdb"
    # A process of its own: a real signal, its handlers and the exit status 128 + signal are the test.
    # The pure-Python engine keeps each run slow enough to be caught mid-sweep.
    proc = subprocess.Popen([sys.executable, str(script), "sweep", str(TRACES), "-t", "resnet32",
                             "--ratios", "0.10:0.20:0.01", "--engine", "python", "--workers", "1",
                             "--store", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200"))
    stored = 0
    for line in proc.stderr:
        stored += line.startswith("stored")
        if stored == 2:
            break
    proc.send_signal(stop)
    out, err = proc.communicate(timeout=120)
    how = "" if stop == signal.SIGINT else f" ({signal.Signals(stop).name})"
    assert proc.returncode == 128 + stop, err
    assert f"interrupted{how}: " in err and "run the same command again to finish" in err
    assert "not run (interrupted)" in out  # the summary table
    frame = results_dataframe(path).set_index("key")
    assert 2 <= len(frame) < len(SLOW_RATIOS)
    assert f"interrupted{how}: {len(frame)} runs stored this time" in err
    for spec in resnet_specs(SLOW_RATIOS):
        if spec.key in frame.index:
            assert frame.loc[spec.key, "clock_ns"] == oracle(spec).clock_ns


@pytest.mark.slow
def test_a_worker_that_dies_loses_its_run_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """A worker process killed mid-run (as the OS's out-of-memory killer would): that run is not
    stored and is named, every other run is stored and right, and a resume runs only the lost one."""
    from dtrlab.sweep import executors

    specs = resnet_specs([0.15, 0.2, 0.25, 0.3])
    victim = specs[1].key
    real_start = executors.Worker.start

    def start_then_kill(worker, spec, timeout_s):
        real_start(worker, spec, timeout_s)
        if spec.key == victim:
            worker.process.kill()

    monkeypatch.setattr(executors.Worker, "start", start_then_kill)
    path = tmp_path / "crash.duckdb"
    summary = run_sweep(specs, path, workers=2, progress=False)
    assert (summary.ran, summary.missing, len(summary.lost)) == (3, 1, 1)
    assert "died (exit status -9)" in summary.lost[0] and str(specs[1].budget_bytes) in summary.lost[0]
    frame = results_dataframe(path).set_index("key")
    assert set(frame.index) == {s.key for s in specs} - {victim}
    for spec in specs:
        if spec.key != victim:
            assert frame.loc[spec.key, "clock_ns"] == oracle(spec).clock_ns
    monkeypatch.setattr(executors.Worker, "start", real_start)
    again = run_sweep(specs, path, workers=2, progress=False)
    assert (again.ran, again.skipped, again.lost) == (1, 3, ())


@pytest.mark.slow
def test_the_sweep_command_names_a_lost_run_and_exits_1(tmp_path, monkeypatch):
    from dtrlab.sweep import executors

    real_start = executors.Worker.start

    def start_then_kill(worker, spec, timeout_s):
        real_start(worker, spec, timeout_s)
        if spec.ratio == 0.2:
            worker.process.kill()

    monkeypatch.setattr(executors.Worker, "start", start_then_kill)
    code, _, err = cli_invoke("sweep", TRACES, "-t", "resnet32", "--ratios", "0.15,0.2,0.25", "--store",
                              tmp_path / "s.duckdb", "--workers", "1")
    assert code == 1
    assert "lost: a worker process died (exit status -9) while running resnet32 dtr" in err
    assert "1 runs not stored because their worker process died; run the same command again" in err
    assert len(results_dataframe(tmp_path / "s.duckdb")) == 2
