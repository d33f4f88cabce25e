"""Traces: reading sources, lowering them into Programs, and loading with a cache."""

from __future__ import annotations

from pathlib import Path

from .lower import Program, lower
from .read import TraceSource, open_source, read_trace, select


def load(source: str | Path, traces: list[str] | None = None, *, cache: bool = True,
         strict: bool = False) -> list[Program]:
    """The lowered programs of the traces in `source` whose names start with one of `traces`."""
    programs = []
    for src in select(open_source(source), traces, str(source)):
        programs.append(lower(read_trace(src), strict=strict))
    return programs


def load_one(source: str | Path, trace: str | None = None, **kwargs) -> Program:
    """Exactly one program: `trace` must pick one trace when the source holds several."""
    from ..errors import UsageError

    programs = load(source, [trace] if trace else None, **kwargs)
    if len(programs) != 1:
        names = ", ".join(p.name for p in programs)
        raise UsageError(f"{source}: pick one trace with --trace (traces: {names})")
    return programs[0]


__all__ = ["Program", "TraceSource", "load", "load_one", "lower", "open_source", "read_trace", "select"]
