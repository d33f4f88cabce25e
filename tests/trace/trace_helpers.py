"""Helpers for the trace tests: comparing Programs field by field, lowering instructions directly.

A plain module, not a conftest.py: a second conftest would shadow `from conftest import ...`.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from dtrlab.trace.lower import Program, lower
from dtrlab.trace.read import START, Annotate, TraceSource, TraceText
from dtrlab.trace.write import format_trace


def program_differences(a: Program, b: Program) -> list[str]:
    """The fields in which two programs differ (arrays by dtype and value), names included."""
    diffs = [k for k in ("name", "sha256", "op_names", "tensor_names") if getattr(a, k) != getattr(b, k)]
    arrays_a, arrays_b = a.arrays(), b.arrays()
    assert arrays_a.keys() == arrays_b.keys()
    for key, x in arrays_a.items():
        y = arrays_b[key]
        if x.dtype != y.dtype or not np.array_equal(x, y):
            diffs.append(key)
    return diffs


def lower_directly(instructions, name: str = "synthetic", strict: bool = False) -> Program:
    """Lower an instruction list without writing it: START skip as the reader does it, same sha256."""
    data = format_trace(instructions).encode()
    starts = [i for i, x in enumerate(instructions) if isinstance(x, Annotate) and x.annotation == START]
    skip = starts[0] + 1 if starts else 0
    source = TraceSource(name, name, f"{name}.jsonl", None, lambda: data)
    text = TraceText(source, hashlib.sha256(data).hexdigest(), tuple(instructions[skip:]),
                     instructions[skip - 1].line if skip else 0)
    return lower(text, strict=strict)


def assert_same_program(a: Program, b: Program) -> None:
    assert program_differences(a, b) == []


# --- trace lines, written by hand -----------------------------------------------------------


def obj(kind, **fields):
    return json.dumps({"INSTRUCTION": kind, **fields})


def const(name, size="4"):
    return [obj("CONSTANT", NAME=name), obj("MEMORY", NAME=name, MEMORY=size)]


def call(name, args, results, time="10", sizes=None, aliases=None):
    lines = [obj("CALL", NAME=name, ARGS=args, RESULT=results, TIME=time)]
    for i, r in enumerate(results):
        lines.append(obj("MEMORY", NAME=r, MEMORY=(sizes or ["8"] * len(results))[i]))
        lines.append(obj("ALIAS", NAME=r, ALIAS=(aliases or ["-1"] * len(results))[i]))
    return lines


GOOD = const("a") + call("f", ["a"], ["b"])  # 5 lines, a valid trace
