"""Traces: reading sources, lowering them into Programs, and loading with a cache.

The submodules load when first used (numpy comes with lower and cache): the CLI imports this
package to resolve a SOURCE, and `dtrlab --help` should not pay for numpy.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from .lower import Program
    from .read import TraceSource, TraceText

# The names this package re-exports, and the submodule each comes from (loaded on first use).
# Not `lower`: once dtrlab.trace.lower is imported, that name is the submodule.
_LAZY = {"Program": "lower", "TraceSource": "read", "open_source": "read", "read_trace": "read",
         "select": "read"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def shipped_traces() -> str:
    """The folder of traces that ship inside dtrlab (captures of its model zoo). dtrlab is installed
    as files, never zipped (its compiled engine could not load from a zip), so the package folder is
    read directly; importlib.resources would cost a plain `simulate` 5 ms of imports."""
    return str(Path(__file__).resolve().parent.parent / "data" / "traces")


def choose_source(source: str | Path | None, traces: str | None = None) -> str | None:
    """SOURCE as given, or the stored file of the fetched trace set named `traces`; never both."""
    if traces is None:
        return None if source is None else str(source)
    if source is not None:
        raise UsageError(f"give SOURCE or --traces {traces}, not both")
    from .fetch import stored_set

    return str(stored_set(traces))


def resolve_source(source: str | Path | None, traces: str | None = None) -> str:
    """A command's SOURCE: as given, a fetched set by name, or the shipped traces when there is none."""
    chosen = choose_source(source, traces)
    return shipped_traces() if chosen is None else chosen


def load(source: str | Path, traces: list[str] | None = None, *, cache: bool = True,
         strict: bool = False) -> list[Program]:
    """The lowered programs of the traces in `source` whose names start with one of `traces`.

    cache: take programs (and their baselines) from the lowered-program cache and store
    new ones there (see trace.cache); False reads and lowers every time and writes nothing.
    strict: a RELEASE of an unknown name is an error instead of being ignored.
    """
    from .read import open_source, select

    return [_load(src, cache, strict) for src in select(open_source(source), traces, str(source))]


def _one(source: str | Path, trace: str | None) -> "TraceSource":
    from .read import open_source, select

    chosen = select(open_source(source), [trace] if trace else None, str(source))
    if len(chosen) != 1:  # said before reading anything: the traces may be large
        names = ", ".join(s.name for s in chosen)
        raise UsageError(f"{source}: pick one trace with --trace (traces: {names})")
    return chosen[0]


def load_one(source: str | Path, trace: str | None = None, *, cache: bool = True,
             strict: bool = False) -> Program:
    """Exactly one program: `trace` must pick one trace when the source holds several."""
    return _load(_one(source, trace), cache, strict)


def read_one(source: str | Path, trace: str | None = None) -> "TraceText":
    """Exactly one trace's instructions, read and checked (not lowered)."""
    from .read import read_trace

    return read_trace(_one(source, trace))


def _load(src: TraceSource, cache: bool, strict: bool) -> Program:
    if cache:
        from .cache import load_cached

        return load_cached(src, strict=strict)
    from .lower import lower
    from .read import read_trace

    return lower(read_trace(src), strict=strict)


__all__ = ["Program", "TraceSource", "choose_source", "load", "load_one", "open_source", "read_one", "read_trace",
           "resolve_source", "select", "shipped_traces"]
