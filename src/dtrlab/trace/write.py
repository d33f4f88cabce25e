"""Writing DTR execution traces: the inverse of trace.read, one instruction a JSON line.

Owns the on-disk spelling: sorted keys, no spaces, integers as decimal strings as in the public traces.
"""

from __future__ import annotations

import gzip as _gzip
import io
import json
from pathlib import Path
from typing import IO, Iterable

from .read import Alias, Annotate, Call, Constant, Copy, CopyFrom, Instruction, Memory, Mutate, Release


def _object(ins: Instruction) -> dict:
    # The public traces spell MEMORY, ALIAS and TIME as decimal strings but MUTATE's
    # indices as JSON integers; the writer keeps both so its output reads like theirs.
    if isinstance(ins, Call):
        return {"INSTRUCTION": "CALL", "NAME": ins.name, "ARGS": list(ins.args),
                "RESULT": list(ins.results), "TIME": str(ins.time_ns)}
    if isinstance(ins, Memory):
        return {"INSTRUCTION": "MEMORY", "NAME": ins.name, "MEMORY": str(ins.size_bytes)}
    if isinstance(ins, Alias):
        return {"INSTRUCTION": "ALIAS", "NAME": ins.name, "ALIAS": str(ins.alias)}
    if isinstance(ins, Constant):
        return {"INSTRUCTION": "CONSTANT", "NAME": ins.name}
    if isinstance(ins, Copy):
        return {"INSTRUCTION": "COPY", "DST": ins.dst, "SRC": ins.src}
    if isinstance(ins, CopyFrom):
        return {"INSTRUCTION": "COPY_FROM", "DST": ins.dst, "SRC": ins.src}
    if isinstance(ins, Release):
        return {"INSTRUCTION": "RELEASE", "NAME": ins.name}
    if isinstance(ins, Mutate):
        return {"INSTRUCTION": "MUTATE", "NAME": ins.name, "ARGS": list(ins.args),
                "MUTATE": [int(m) for m in ins.mutate], "TIME": str(ins.time_ns)}
    if isinstance(ins, Annotate):
        return {"INSTRUCTION": "ANNOTATE", "ANNOTATION": ins.annotation}
    raise TypeError(f"not a trace instruction: {ins!r}")


def format_instruction(ins: Instruction) -> str:
    """One instruction as the line the reader parses back into it (without the newline)."""
    return json.dumps(_object(ins), sort_keys=True, separators=(",", ":"))


def format_trace(instructions: Iterable[Instruction]) -> str:
    """A whole trace as text: one line an instruction, each ending in a newline."""
    return "".join(format_instruction(ins) + "\n" for ins in instructions)


def write_trace(instructions: Iterable[Instruction], path_or_file: str | Path | IO,
                gzip: bool | None = None) -> None:
    """Write `instructions` as JSON lines to a path or an open file.

    gzip: compress; None means "when the path ends in .gz" (and no for an open file).
    An open file may be text or binary; gzip output needs a binary one.
    The instructions' `line` fields are ignored: line numbers are where they land.
    """
    text = format_trace(instructions)
    if isinstance(path_or_file, (str, Path)):
        path = Path(path_or_file)
        if gzip is None:
            gzip = path.name.endswith(".gz")
        data = text.encode("utf-8")
        # mtime=0 keeps the bytes (hence the cache key) the same from run to run.
        path.write_bytes(_gzip.compress(data, mtime=0) if gzip else data)
        return
    f = path_or_file
    if gzip:
        if isinstance(f, io.TextIOBase):
            raise TypeError("gzip output needs a file opened in binary mode")
        f.write(_gzip.compress(text.encode("utf-8"), mtime=0))
    elif isinstance(f, io.TextIOBase):
        f.write(text)
    else:
        f.write(text.encode("utf-8"))


__all__ = ["format_instruction", "format_trace", "write_trace"]
