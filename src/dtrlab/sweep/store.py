"""The results store: one embedded DuckDB file, one row per run, each written in its own transaction.

Owns the schema (versioned in a meta table), what counts as done, and export to CSV or Parquet.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import duckdb

from .. import __version__
from ..errors import UsageError
from ..sim.result import TIMEOUT, RunResult
from . import DEFAULT_STORE
from .grid import RunSpec

if TYPE_CHECKING:
    import pandas as pd

APP = "dtrlab-results"
SCHEMA_VERSION = 1

_SCHEMA = f"""
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
    overhead DOUBLE,              -- measured columns are NULL for a timeout
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
CREATE TABLE storage_evictions (
    key VARCHAR NOT NULL,
    storage BIGINT NOT NULL,
    heuristic_evictions BIGINT NOT NULL,
    eager_evictions BIGINT NOT NULL,
    rematerializations BIGINT NOT NULL,
    PRIMARY KEY (key, storage)
);
"""

_RUN_COLUMNS = (
    "key", "trace", "trace_sha256", "policy", "runtime", "ratio", "budget_bytes", "outcome",
    "overhead", "clock_ns", "remat_ns", "evictions", "eager_evictions", "distinct_evicted",
    "peak_bytes", "score_evals", "baseline_compute_ns", "baseline_peak_bytes", "overhead_limit",
    "seed", "engine", "timeout_s", "wall_s", "created_at", "dtrlab_version",
)
_MEASURED = ("clock_ns", "remat_ns", "evictions", "eager_evictions", "distinct_evicted",
             "peak_bytes", "score_evals", "baseline_compute_ns", "baseline_peak_bytes")

# What an export shows first: the columns a reader of one row wants before the rest.
EXPORT_COLUMNS = (
    "trace", "policy", "runtime", "ratio", "budget_bytes", "outcome", "overhead", "evictions",
    "distinct_evicted", "eager_evictions", "clock_ns", "remat_ns", "peak_bytes", "score_evals",
    "baseline_compute_ns", "baseline_peak_bytes", "overhead_limit", "seed", "engine", "timeout_s",
    "wall_s", "trace_sha256", "dtrlab_version", "created_at", "key",
)
_EXPORT_SQL = f"SELECT {', '.join(EXPORT_COLUMNS)} FROM runs ORDER BY trace, policy, runtime, budget_bytes, key"


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        message = _first_line(exc)
        if "not a valid DuckDB database file" in message:
            raise UsageError(f"{path}: not a dtrlab results store (not a DuckDB file); "
                             "pick another --store") from None
        if "lock" in message.lower():
            raise UsageError(f"{path}: the store is in use by another process "
                             "(a sweep still running?)") from None
        raise UsageError(f"{path}: cannot open the results store: {message}") from None


class Store:
    """An open results file. Only one process may have it open for writing (DuckDB locks it)."""

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
        self._con = _connect(self.path, read_only)
        try:
            self._check_or_create(writable=not read_only)
        except BaseException:
            self._con.close()
            raise

    def _check_or_create(self, writable: bool) -> None:
        tables = {row[0] for row in self._con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
        if not tables and writable:
            self._con.begin()
            self._con.execute(_SCHEMA)
            self._con.execute("INSERT INTO meta VALUES (?, ?, ?, ?)",
                              [APP, SCHEMA_VERSION, __version__, datetime.now(timezone.utc)])
            self._con.commit()
            return
        foreign = UsageError(f"{self.path}: a DuckDB file but not a dtrlab results store; "
                             "pick another --store")
        if "meta" not in tables:
            raise foreign
        try:
            row = self._con.execute("SELECT app, schema_version FROM meta").fetchone()
        except duckdb.Error:
            raise foreign from None
        if row is None or row[0] != APP:
            raise foreign
        version = row[1]
        if version != SCHEMA_VERSION:
            age = "an older" if version < SCHEMA_VERSION else "a newer"
            raise UsageError(f"{self.path}: written by {age} dtrlab (store schema {version}, this "
                             f"dtrlab reads {SCHEMA_VERSION}); use that dtrlab, or a new --store")

    # --- reading --------------------------------------------------------------------------

    def keys(self) -> set[str]:
        """Every stored key, whatever its outcome."""
        return {row[0] for row in self._con.execute("SELECT key FROM runs").fetchall()}

    def timed_out(self) -> dict[str, float | None]:
        """The keys stored as timeouts, with the per-run limit each one ran under."""
        return dict(self._con.execute(
            "SELECT key, timeout_s FROM runs WHERE outcome = ?", [TIMEOUT]).fetchall())

    def rows(self, keys: Iterable[str] | None = None) -> pd.DataFrame:
        """The runs table (or the rows of `keys`), one row per run, in export order."""
        if keys is None:
            return self._con.execute(_EXPORT_SQL).df()
        import pandas as pd  # only when a frame is asked for: the CLI stays light

        wanted = pd.DataFrame({"key": list(keys)})
        self._con.register("_wanted", wanted)
        try:
            return self._con.execute(
                _EXPORT_SQL.replace("FROM runs", "FROM runs SEMI JOIN _wanted USING (key)")).df()
        finally:
            self._con.unregister("_wanted")

    def storage_evictions(self, key: str) -> pd.DataFrame:
        return self._con.execute(
            "SELECT storage, heuristic_evictions, eager_evictions, rematerializations "
            "FROM storage_evictions WHERE key = ? ORDER BY storage", [key]).df()

    def __len__(self) -> int:
        return self._con.execute("SELECT count(*) FROM runs").fetchone()[0]

    # --- writing --------------------------------------------------------------------------

    def put(self, spec: RunSpec, result: RunResult, wall_s: float,
            per_storage: Mapping[int, Any] | Iterable[Any] | None = None, *,
            timeout_s: float | None = None) -> None:
        """Store one finished run (and its per-storage counts, when instruments gave them)
        in one transaction, replacing an earlier timeout of the same key."""
        timed_out = result.outcome == TIMEOUT
        row = {
            "key": spec.key, "trace": spec.trace, "trace_sha256": spec.trace_sha256,
            "policy": spec.policy, "runtime": spec.runtime, "ratio": spec.ratio,
            "budget_bytes": spec.budget_bytes, "outcome": result.outcome,
            "overhead": None if timed_out else result.overhead,
            "overhead_limit": spec.overhead_limit, "seed": spec.seed,
            "engine": None if timed_out else result.engine, "timeout_s": timeout_s,
            "wall_s": float(wall_s), "created_at": datetime.now(timezone.utc),
            "dtrlab_version": __version__,
        }
        for name in _MEASURED:
            row[name] = None if timed_out else int(getattr(result, name))
        if per_storage is None:
            per_storage = getattr(result.observations, "per_storage", None)
        storages = _storage_rows(per_storage)
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


def export(store: Store | str | os.PathLike = DEFAULT_STORE, fmt: str = "parquet",
           out: str | os.PathLike | None = None) -> int:
    """Write one row per run as Parquet or CSV (CSV goes to stdout without `out`); returns the row count."""
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    if fmt == "parquet" and out is None:
        raise UsageError("a Parquet export needs a file: give --out FILE")
    if out is not None and not Path(out).parent.is_dir():
        raise UsageError(f"{out}: the folder {Path(out).parent} does not exist")
    opened, mine = _open(store)
    try:
        frame = opened.rows()
    finally:
        if mine:
            opened.close()
    if out is None:
        frame.to_csv(sys.stdout, index=False)
        return len(frame)
    # Write beside the target and rename, so an interrupted export never leaves half a file.
    target = Path(out)
    partial = target.with_name(target.name + ".partial")
    if fmt == "csv":
        frame.to_csv(partial, index=False)
    else:
        frame.to_parquet(partial, index=False)
    os.replace(partial, target)
    return len(frame)
