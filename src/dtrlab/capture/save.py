"""Turning a Capture into a trace file or a lowered Program, through dtrlab's own writer and reader.

Owns nothing of the format: the bytes go through trace.write and back through trace.read's checks.
"""

from __future__ import annotations

from pathlib import Path

from ..trace.lower import Program, lower
from ..trace.read import TraceSource, TraceText, parse_bytes
from ..trace.write import format_trace, write_trace
from .recorder import Capture


def save(capture: Capture, path: str | Path, gzip: bool | None = None) -> None:
    """Write the captured trace; gzip None means "when the path ends in .gz"."""
    write_trace(capture.instructions, path, gzip=gzip)


def to_text(capture: Capture, name: str = "captured") -> TraceText:
    """The written trace read back (the same validation as a file gets)."""
    data = format_trace(capture.instructions).encode("utf-8")
    source = TraceSource(name, name, f"<capture {name}>", True, lambda: data)
    return parse_bytes(data, source)


def to_program(capture: Capture, name: str = "captured") -> Program:
    """The Program dtrlab lowers from the written trace."""
    return lower(to_text(capture, name))
