"""The results store: one embedded DuckDB file, one row per run, each written in its own transaction.

Owns the schema (versioned in a meta table, older versions migrated forward), what counts as done, and
export to CSV or Parquet. A solve's row (policy optimal) is a run's row with the solver's columns set.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import duckdb

from ..version import __version__
from ..errors import UsageError
from ..sim.result import OK, OOM, TIMEOUT, RunResult, run_overhead
from . import DEFAULT_STORE
from .grid import RunSpec
from .wal import wal_layout

if TYPE_CHECKING:
    import pandas as pd

    from ..optimal.solve import OptimalResult

APP = "dtrlab-results"
SCHEMA_VERSION = 2

# The first schema's tables; {added} becomes the columns added since (_ADDED_COLUMNS), as ALTERs.
_SCHEMA = """
CREATE TABLE meta (
    app VARCHAR NOT NULL,
    schema_version INTEGER NOT NULL,
    created_by VARCHAR NOT NULL,  -- the dtrlab version that made the file
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE runs (
    key VARCHAR PRIMARY KEY,
    trace VARCHAR NOT NULL,
    trace_sha256 VARCHAR NOT NULL,
    policy VARCHAR NOT NULL,
    runtime VARCHAR NOT NULL,
    ratio DOUBLE,                 -- NULL: a byte budget given directly
    budget_bytes BIGINT NOT NULL,
    outcome VARCHAR NOT NULL,     -- ok | oom | remat_limit | timeout
    overhead DOUBLE,              -- NULL for a run that did not finish (read by run_overhead's rule)
    clock_ns BIGINT,
    remat_ns BIGINT,
    evictions BIGINT,
    eager_evictions BIGINT,
    distinct_evicted BIGINT,
    peak_bytes BIGINT,
    score_evals BIGINT,
    baseline_compute_ns BIGINT,
    baseline_peak_bytes BIGINT,
    overhead_limit DOUBLE,
    seed BIGINT NOT NULL,
    engine VARCHAR,
    timeout_s DOUBLE,             -- the per-run limit it ran under (NULL: none)
    wall_s DOUBLE NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    dtrlab_version VARCHAR NOT NULL
);
{added}
CREATE TABLE storage_evictions (
    key VARCHAR NOT NULL,
    storage BIGINT NOT NULL,
    heuristic_evictions BIGINT NOT NULL,
    eager_evictions BIGINT NOT NULL,
    rematerializations BIGINT NOT NULL,
    PRIMARY KEY (key, storage)
);
"""

# Each schema version after the first adds nullable columns to runs (a row of an older version reads
# them as NULL): version -> (column, type, what it holds). Opening an older store for writing adds them
# in one transaction and sets its version; a read-only open reads them as NULL and changes nothing.
_ADDED_COLUMNS = {
    2: (  # the solver's row (policy optimal); NULL in a simulation's row
        ("bound_overhead", "DOUBLE", "a lower bound on the overhead of any schedule (inf: none fits)"),
        ("gap", "DOUBLE", "(overhead - bound) / overhead of the best schedule found"),
        ("solver_status", "VARCHAR", "optimal | feasible | infeasible | unknown"),
        ("solver", "VARCHAR", "highs | cpsat | none (the crossing bound alone)"),
        ("solve_kind", "VARCHAR", "exact | crossing-bound"),
        ("time_limit_s", "DOUBLE", "the solve's time limit"),
        ("target_gap", "DOUBLE", "the gap at which the solve was to stop (--gap)"),
    ),
}
_SCHEMA = _SCHEMA.format(added="\n".join(
    f"ALTER TABLE runs ADD COLUMN {name} {kind};  -- {what}"
    for version in sorted(_ADDED_COLUMNS) for name, kind, what in _ADDED_COLUMNS[version]))
_SOLVER_COLUMNS = tuple(name for name, _, _ in _ADDED_COLUMNS[2])

_RUN_COLUMNS = (
    "key", "trace", "trace_sha256", "policy", "runtime", "ratio", "budget_bytes", "outcome",
    "overhead", "clock_ns", "remat_ns", "evictions", "eager_evictions", "distinct_evicted",
    "peak_bytes", "score_evals", "baseline_compute_ns", "baseline_peak_bytes", "overhead_limit",
    "seed", "engine", "timeout_s", "wall_s", "created_at", "dtrlab_version", *_SOLVER_COLUMNS,
)
_MEASURED = ("clock_ns", "remat_ns", "evictions", "eager_evictions", "distinct_evicted",
             "peak_bytes", "score_evals", "baseline_compute_ns", "baseline_peak_bytes")

# What an export shows first: the columns a reader of one row wants before the rest.
EXPORT_COLUMNS = (
    "trace", "policy", "runtime", "ratio", "budget_bytes", "outcome", "overhead", "evictions",
    "distinct_evicted", "eager_evictions", "clock_ns", "remat_ns", "peak_bytes", "score_evals",
    "baseline_compute_ns", "baseline_peak_bytes", "overhead_limit", "seed", "engine", "timeout_s",
    "wall_s", *_SOLVER_COLUMNS, "trace_sha256", "dtrlab_version", "created_at", "key",
)


def _export_sql(present: set[str]) -> str:
    """The export's SELECT; a column an older schema lacks reads as NULL."""
    cols = [c if c in present else f"NULL AS {c}" for c in EXPORT_COLUMNS]
    return f"SELECT {', '.join(cols)} FROM runs ORDER BY trace, policy, runtime, budget_bytes, key"


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def wal_path(path: Path) -> Path:
    """The write-ahead log DuckDB keeps beside a database until it checkpoints (it holds the
    runs committed since, e.g. after a kill -9)."""
    return path.with_name(path.name + ".wal")


# DuckDB's failures, told apart by how its messages start (after the "IO Error: " of their type).
_LOCKED = "Could not set lock on file"
_NOT_DUCKDB = "exists, but it is not a valid DuckDB database file"
_DAMAGED_LOG = "Failure while replaying WAL file"
_DAMAGED_FILE = ("Corrupt database file", "Could not read enough bytes from file")


def _reason(error: Exception) -> str:
    message = _first_line(error)
    return message.removeprefix("IO Error: ")


def _damaged_log_error(path: Path, reason: str) -> UsageError:
    return UsageError(f"{path}: its write-ahead log {wal_path(path).name} is damaged ({reason}); both "
                      f"files were left as they are. `dtrlab results salvage --store {path} --out NEW.duckdb` "
                      "copies every run that can still be read into a new store")


def _fault(path: Path, error: duckdb.Error) -> UsageError | None:
    """The one line for a DuckDB failure that means the file cannot be used as it is, or None."""
    reason = _reason(error)
    if reason.startswith(_LOCKED):
        return UsageError(f"{path}: the store is in use by another process (a sweep still running?)")
    if reason.startswith("The file") and reason.endswith(_NOT_DUCKDB + "!"):
        return UsageError(f"{path}: not a dtrlab results store (not a DuckDB file); pick another --store")
    if reason.startswith(_DAMAGED_LOG):
        return _damaged_log_error(path, reason.split('": ', 1)[-1])  # without DuckDB's path of the log
    if reason.startswith(_DAMAGED_FILE):
        return UsageError(f"{path}: the results store is damaged ({reason}); it was left as it is. "
                          "Restore it from a backup, or sweep into a new --store")
    return None


@contextmanager
def _faults_named(path: Path) -> Iterator[None]:
    """Turn a DuckDB failure that means damage (or a lock) into its one line; others pass through."""
    try:
        yield
    except duckdb.Error as exc:
        fault = _fault(path, exc)
        if fault is None:
            raise
        raise fault from None


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise (_fault(path, exc) or UsageError(
            f"{path}: cannot open the results store: {_reason(exc)}")) from None


def _check_log(path: Path) -> None:
    """Refuse a log that DuckDB would cut short: replaying it drops what follows without a word,
    and a writable open then deletes the log."""
    log = wal_path(path)
    try:
        data = log.read_bytes()
    except FileNotFoundError:
        return
    layout = wal_layout(data) if data else None
    if layout is not None and not layout.whole:
        raise _damaged_log_error(path, f"its entries stop at byte {layout.cut_at} of {layout.size_bytes}, "
                                      "and DuckDB would drop the rest")


# Reading every column of every table makes DuckDB check the checksum of every block in use.
_READ_ALL = "SELECT bit_xor(hash(COLUMNS(*))) FROM {table}"
_TABLES = ("meta", "runs", "storage_evictions")
# The older schemas this dtrlab opens (and brings forward when it opens one for writing).
_MIGRATABLE = tuple(range(1, SCHEMA_VERSION))


def _reading(method):
    """A Store method whose DuckDB damage errors become one line."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with _faults_named(self.path):
            return method(self, *args, **kwargs)
    return wrapper


class Store:
    """An open results file. Only one process may have it open for writing (DuckDB locks it).

    An existing file is first opened read-only and read through, so that DuckDB never replays,
    rewrites or deletes anything of a file that is damaged, foreign or of another schema; only a
    file that did not exist gets the schema. `version` is the file's schema: an older one that this
    dtrlab reads is brought to SCHEMA_VERSION by a writable open (_migrate), never by a read-only one.
    """

    def __init__(self, path: str | os.PathLike = DEFAULT_STORE, *, create: bool = True,
                 read_only: bool = False) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise UsageError(f"{self.path}: is a folder, not a results store file")
        exists = self.path.exists()
        if not exists and (read_only or not create):
            raise UsageError(f"{self.path}: no such results store")
        if not exists and not self.path.parent.is_dir():
            raise UsageError(f"{self.path}: the folder {self.path.parent} does not exist")
        self.version = SCHEMA_VERSION
        if exists:
            _check_log(self.path)
            self._con = _connect(self.path, read_only=True)
            self._checked(self._check)
            if read_only:
                self._checked(self._read_columns)
                return
            self._con.close()
        self._con = _connect(self.path, read_only)
        if not exists:
            self._checked(self._create)
        elif self.version != SCHEMA_VERSION:
            self._checked(self._migrate)
        self._checked(self._read_columns)

    def _read_columns(self) -> None:
        self._columns = {row[0] for row in self._con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
            "AND table_name = 'runs'").fetchall()}
        self._export_sql = _export_sql(self._columns)

    def _migrate(self) -> None:
        """An older store brought to this schema in one transaction: the columns added since, NULL in
        its rows, and its version. Nothing else changes; a failure leaves it as it was."""
        self._con.begin()
        try:
            for version in range(self.version + 1, SCHEMA_VERSION + 1):
                for name, kind, _ in _ADDED_COLUMNS[version]:
                    self._con.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
            self._con.execute("UPDATE meta SET schema_version = ?", [SCHEMA_VERSION])
            self._con.commit()
        except BaseException:
            self._con.rollback()
            raise
        self.version = SCHEMA_VERSION

    def _checked(self, step) -> None:
        try:
            with _faults_named(self.path):
                step()
        except BaseException:
            self._con.close()
            raise

    def _create(self) -> None:
        self._con.begin()
        self._con.execute(_SCHEMA)
        self._con.execute("INSERT INTO meta VALUES (?, ?, ?, ?)",
                          [APP, SCHEMA_VERSION, __version__, datetime.now(timezone.utc)])
        self._con.commit()

    def _check(self) -> None:
        tables = {row[0] for row in self._con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
        foreign = UsageError(f"{self.path}: a DuckDB file but not a dtrlab results store; "
                             "pick another --store")
        if "meta" not in tables:
            raise foreign
        try:
            # fetchall, not fetchone: DuckDB refuses other work (register) on a connection whose
            # last result was not read to its end.
            rows = self._con.execute("SELECT app, schema_version FROM meta").fetchall()
        except duckdb.Error as exc:
            if _fault(self.path, exc) is not None:
                raise
            raise foreign from None
        row = rows[0] if rows else None
        if row is None or row[0] != APP:
            raise foreign
        version = row[1]
        if version != SCHEMA_VERSION and version not in _MIGRATABLE:
            age = "an older" if version < SCHEMA_VERSION else "a newer"
            raise UsageError(f"{self.path}: written by {age} dtrlab (store schema {version}, this "
                             f"dtrlab reads {', '.join(map(str, (*_MIGRATABLE, SCHEMA_VERSION)))}); use that "
                             "dtrlab, or a new --store")
        self.version = version
        for table in _TABLES:
            self._con.execute(_READ_ALL.format(table=table)).fetchall()

    # --- reading --------------------------------------------------------------------------

    @_reading
    def keys(self) -> set[str]:
        """Every stored key, whatever its outcome."""
        return {row[0] for row in self._con.execute("SELECT key FROM runs").fetchall()}

    @_reading
    def timed_out(self) -> dict[str, float | None]:
        """The keys stored as timeouts, with the per-run limit each one ran under."""
        return dict(self._con.execute(
            "SELECT key, timeout_s FROM runs WHERE outcome = ?", [TIMEOUT]).fetchall())

    @_reading
    def rows(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """The runs table (or the rows of `keys`), one row per run, in export order."""
        if keys is None:
            return _with_overheads(self._con.execute(self._export_sql).df())
        import pandas as pd  # only when a frame is asked for: the CLI stays light

        wanted = pd.DataFrame({"key": list(keys)})
        self._con.register("_wanted", wanted)
        try:
            return _with_overheads(self._con.execute(
                self._export_sql.replace("FROM runs", "FROM runs SEMI JOIN _wanted USING (key)")).df())
        finally:
            self._con.unregister("_wanted")

    @_reading
    def storage_evictions(self, key: str) -> pd.DataFrame:
        return self._con.execute(
            "SELECT storage, heuristic_evictions, eager_evictions, rematerializations "
            "FROM storage_evictions WHERE key = ? ORDER BY storage", [key]).df()

    @_reading
    def __len__(self) -> int:
        return self._con.execute("SELECT count(*) FROM runs").fetchone()[0]

    # --- writing --------------------------------------------------------------------------

    @_reading
    def put(self, spec: RunSpec, result: RunResult | OptimalResult, wall_s: float,
            per_storage: Mapping[int, Any] | Iterable[Any] | None = None, *,
            timeout_s: float | None = None) -> None:
        """Store one finished run (and its per-storage counts, when instruments gave them), or one
        solve's answer (an OptimalResult), in one transaction, replacing an earlier timeout of the key."""
        row = {
            "key": spec.key, "trace": spec.trace, "trace_sha256": spec.trace_sha256,
            "policy": spec.policy, "runtime": spec.runtime, "ratio": spec.ratio,
            "budget_bytes": spec.budget_bytes,
            "overhead_limit": spec.overhead_limit, "seed": spec.seed, "timeout_s": timeout_s,
            "wall_s": float(wall_s), "created_at": datetime.now(timezone.utc),
            "dtrlab_version": __version__,
            **dict.fromkeys(_SOLVER_COLUMNS),
        }
        if spec.solve is not None:
            row.update(solver=spec.solve.solver, time_limit_s=spec.solve.time_limit_s, target_gap=spec.solve.gap)
        storages = []
        if isinstance(result, RunResult):
            timed_out = result.outcome == TIMEOUT
            row.update(outcome=result.outcome, overhead=result.overhead, engine=None if timed_out else result.engine)
            for name in _MEASURED:
                row[name] = None if timed_out else int(getattr(result, name))
            if per_storage is None:
                per_storage = getattr(result.observations, "per_storage", None)
            storages = _storage_rows(per_storage)
        else:
            row.update(_solved_columns(result))
        con = self._con
        con.begin()
        try:
            con.execute("DELETE FROM storage_evictions WHERE key = ?", [spec.key])
            con.execute("DELETE FROM runs WHERE key = ?", [spec.key])
            con.execute(f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES "
                        f"({', '.join('?' for _ in _RUN_COLUMNS)})", [row[c] for c in _RUN_COLUMNS])
            if storages:
                con.executemany("INSERT INTO storage_evictions VALUES (?, ?, ?, ?, ?)",
                                [[spec.key, *s] for s in storages])
            con.commit()
        except BaseException:
            con.rollback()
            raise

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _solved_columns(result: OptimalResult) -> dict:
    """A solve's row: outcome ok with the replay's clock (so its overhead is the checker's, by
    run_overhead's rule) when it has a schedule, else oom with no clock (solver_status says whether no
    schedule exists, infeasible, or none was found, unknown); its bound, gap and status beside."""
    replay = result.replay
    row = {name: None for name in _MEASURED}
    row.update(outcome=OK if replay is not None else OOM, overhead=None if replay is None else replay.overhead,
               engine=None, solver=result.solver,
               solver_status=result.status, solve_kind=result.kind, gap=result.gap,
               bound_overhead=float(result.bound_overhead))
    if replay is not None:
        row.update(clock_ns=int(replay.clock_ns), remat_ns=int(replay.remat_ns), peak_bytes=int(replay.peak_bytes),
                   baseline_compute_ns=int(replay.compute_ns))
    return row


def _with_overheads(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with each row's overhead by the one rule (run_overhead) from its stored clock and
    compute: a store written before the rule holds the stopped clock / compute of an OOM run, and
    no reader (a table, an analysis, an export) may show that as an overhead. NaN where none."""
    import pandas as pd

    frame["overhead"] = pd.Series(
        [run_overhead(o, c, b) for o, c, b in zip(frame["outcome"], frame["clock_ns"], frame["baseline_compute_ns"])],
        index=frame.index, dtype="float64")
    return frame


def _storage_rows(per_storage) -> list[tuple[int, int, int, int]]:
    """(storage, heuristic evictions, eager evictions, rematerializations) rows from a mapping
    storage -> counts (a 3-sequence or a mapping with those names) or from 4-sequences."""
    if per_storage is None:
        return []
    names = ("heuristic_evictions", "eager_evictions", "rematerializations")
    items = per_storage.items() if isinstance(per_storage, Mapping) else \
        ((row[0], row[1:]) for row in per_storage)
    out = []
    for storage, counts in items:
        if isinstance(counts, Mapping):
            counts = [counts[n] for n in names]
        h, e, r = (int(c) for c in counts)
        out.append((int(storage), h, e, r))
    return sorted(out)


def _open(store: Store | str | os.PathLike) -> tuple[Store, bool]:
    if isinstance(store, Store):
        return store, False
    return Store(store, read_only=True), True


def results_dataframe(path: Store | str | os.PathLike = DEFAULT_STORE) -> pd.DataFrame:
    """Every run in a store as a DataFrame, one row per run, in export order."""
    store, mine = _open(path)
    try:
        return store.rows()
    finally:
        if mine:
            store.close()


FORMATS = ("parquet", "csv")


def _check_out(out: Path) -> None:
    """An output file may be written here: its folder exists and it is not itself a folder."""
    if out.is_dir():
        raise UsageError(f"{out}: is a folder; give a file name")
    if not out.parent.is_dir():
        what = "is not a folder" if out.parent.exists() else "does not exist"
        raise UsageError(f"{out}: the folder {out.parent} {what}")


@contextmanager
def _partial(target: Path) -> Iterator[Path]:
    """A temporary name beside `target`, renamed onto it only when the block succeeds, so that an
    interrupted or failed write never leaves half a file; an OSError is one line."""
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    except OSError as exc:
        raise UsageError(f"{target}: cannot write here: {exc.strerror}") from None
    os.close(fd)
    partial = Path(name)
    try:
        yield partial
        os.replace(partial, target)
    except OSError as exc:
        raise UsageError(f"{target}: cannot write: {exc.strerror}") from None
    finally:
        partial.unlink(missing_ok=True)


def export(store: Store | str | os.PathLike = DEFAULT_STORE, fmt: str = "parquet",
           out: str | os.PathLike | None = None) -> int:
    """Write one row per run as Parquet or CSV (CSV goes to stdout without `out`); returns the row count."""
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "parquet" and out is None:
        raise UsageError("a Parquet export needs a file: give --out FILE")
    if out is not None:
        _check_out(Path(out))
    opened, mine = _open(store)
    try:
        frame = opened.rows()
    finally:
        if mine:
            opened.close()
    if out is None:
        frame.to_csv(sys.stdout, index=False)
        return len(frame)
    with _partial(Path(out)) as partial:
        if fmt == "csv":
            frame.to_csv(partial, index=False)
        else:
            frame.to_parquet(partial, index=False)
    return len(frame)


@dataclass(frozen=True)
class Salvaged:
    """What `salvage` kept: the runs copied, and how much of the damaged log replayed."""

    runs: int
    log_bytes_kept: int
    log_bytes: int


def _opens(path: Path) -> UsageError | None:
    """None when `path` opens as a store (read-only), else why not."""
    try:
        Store(path, read_only=True).close()
    except UsageError as exc:
        return exc
    return None


def salvage(store: str | os.PathLike, out: str | os.PathLike) -> Salvaged:
    """Copy every run that can still be read from a store with a damaged log into a new store `out`.

    The damaged files are only read: a private copy of the main file is opened with the longest
    head of the log, cut at an entry's end, that replays (found by bisection: a head that ends
    before the damage replays, one that reaches it does not), then checkpointed into `out`.
    """
    source, target = Path(store), Path(out)
    if not source.is_file():
        raise UsageError(f"{source}: no such results store")
    if target.exists() or wal_path(target).exists():
        raise UsageError(f"{target}: already exists; salvage writes a new store")
    _check_out(target)
    log = wal_path(source).read_bytes() if wal_path(source).exists() else b""
    layout = wal_layout(log) if log else None
    # Heads to try, shortest first: none of the log, each entry's end (or all of a log in a
    # framing this does not read).
    cuts = [0, *(layout.ends if layout is not None else [len(log)])]
    work = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.salvage."))
    try:
        copy = work / "store.duckdb"
        shutil.copyfile(source, copy)

        def opens_with(cut: int) -> UsageError | None:
            wal_path(copy).unlink(missing_ok=True)
            if cut:
                wal_path(copy).write_bytes(log[:cut])
            return _opens(copy)

        error = opens_with(0)
        if error is not None:
            raise error
        lo, hi = 0, len(cuts) - 1  # cuts[lo] opens; find the last that does
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if opens_with(cuts[mid]) is None:
                lo = mid
            else:
                hi = mid - 1
        opens_with(cuts[lo])
        with Store(copy) as repaired:  # a writable open replays the head and checkpoints it
            runs = len(repaired)
        os.replace(copy, target)
    except OSError as exc:
        raise UsageError(f"{target}: cannot write: {exc.strerror}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Salvaged(runs, cuts[lo], len(log))
