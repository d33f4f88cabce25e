"""The formats a timeline is written in, and each one's writer (imported only when asked for)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path


class Format(str, Enum):
    perfetto = "perfetto"
    memviz = "memviz"
    csv = "csv"


# Each format's writer: (module, function); imported only when asked for (perfetto's protos are big).
WRITERS = {Format.perfetto: ("perfetto", "write_perfetto"), Format.memviz: ("memviz", "write_memviz"),
           Format.csv: ("table", "write_csv")}
# The file name ending each format conventionally has (docs/timelines.md says how to open each).
SUFFIXES = {Format.perfetto: ".pftrace", Format.memviz: ".pickle", Format.csv: ".csv"}


def write(tl, fmt: Format | str, path: str | Path):
    """Write the timeline `tl` in format `fmt` to `path`; the writer's counts."""
    import importlib

    module, name = WRITERS[Format(fmt)]
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)(tl, path)
