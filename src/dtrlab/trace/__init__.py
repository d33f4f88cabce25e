"""Traces: reading sources, lowering them into Programs, and loading with a cache."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .cache import load_cached
from .lower import Program, lower
from .read import TraceSource, open_source, read_trace, select


def shipped_traces() -> str:
    """The folder of traces that ship inside dtrlab (captures of its model zoo)."""
    import importlib.resources

    return str(importlib.resources.files("dtrlab") / "data" / "traces")


def resolve_source(source: str | Path | None) -> str:
    """A command's SOURCE: as given, or the shipped traces when there is none."""
    return shipped_traces() if source is None else str(source)


def load(source: str | Path, traces: list[str] | None = None, *, cache: bool = True,
         strict: bool = False) -> list[Program]:
    """The lowered programs of the traces in `source` whose names start with one of `traces`.

    cache: take programs (and their baselines) from the lowered-program cache and store
    new ones there (see trace.cache); False reads and lowers every time and writes nothing.
    strict: a RELEASE of an unknown name is an error instead of being ignored.
    """
    return [_load(src, cache, strict) for src in select(open_source(source), traces, str(source))]


def load_one(source: str | Path, trace: str | None = None, *, cache: bool = True,
             strict: bool = False) -> Program:
    """Exactly one program: `trace` must pick one trace when the source holds several."""
    chosen = select(open_source(source), [trace] if trace else None, str(source))
    if len(chosen) != 1:  # said before reading anything: the traces may be large
        names = ", ".join(s.name for s in chosen)
        raise UsageError(f"{source}: pick one trace with --trace (traces: {names})")
    return _load(chosen[0], cache, strict)


def _load(src: TraceSource, cache: bool, strict: bool) -> Program:
    if cache:
        return load_cached(src, strict=strict)
    return lower(read_trace(src), strict=strict)


__all__ = ["Program", "TraceSource", "load", "load_one", "lower", "open_source", "read_trace",
           "resolve_source", "select", "shipped_traces"]
