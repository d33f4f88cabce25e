"""Hand-written programs for the schedule tests, built through the real writer, reader and lowering,
with every figure of their schedules computed by hand in the tests."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))

from helpers import program_of, synthetic_program  # noqa: E402,F401

from dtrlab.schedule import Schedule  # noqa: E402
from dtrlab.trace.read import Alias, Call, Constant, Memory, Release  # noqa: E402


def _lines(*items):
    return [make(k + 1, *fields) for k, (make, *fields) in enumerate(items)]


def view_program():
    """Operators: 0 constant w (8 B); 1 a = f(w) (100 B, 10 ns); 2 v = view(a) (an alias of a, 1 ns);
    3 b = g(v) (200 B, 20 ns); 4 c = h(b) (50 B, 30 ns). Storages: 0 w, 1 a (and v), 2 b, 3 c.
    a and v are released after g, b after h; c is the output."""
    return program_of(_lines(
        (Constant, "w"), (Memory, "w", 8),
        (Call, "f", ("w",), ("a",), 10), (Memory, "a", 100), (Alias, "a", -1),
        (Call, "view", ("a",), ("v",), 1), (Memory, "v", 0), (Alias, "v", 0),
        (Call, "g", ("v",), ("b",), 20), (Memory, "b", 200), (Alias, "b", -1),
        (Release, "a"), (Release, "v"),
        (Call, "h", ("b",), ("c",), 30), (Memory, "c", 50), (Alias, "c", -1),
        (Release, "b"),
    ), "view")


def split_program():
    """Operators: 0 constant w (8 B); 1 (x, y) = split(w) (40 B and 60 B, 5 ns); 2 z = add(x, y)
    (10 B, 7 ns). Storages: 0 w, 1 x, 2 y, 3 z. x and y are released after add; z is the output."""
    return program_of(_lines(
        (Constant, "w"), (Memory, "w", 8),
        (Call, "split", ("w",), ("x", "y"), 5), (Memory, "x", 40), (Alias, "x", -1), (Memory, "y", 60), (Alias, "y", -1),
        (Call, "add", ("x", "y"), ("z",), 7), (Memory, "z", 10), (Alias, "z", -1),
        (Release, "x"), (Release, "y"),
    ), "split")


def schedule(program, *events, made_by: str = "hand", budget_bytes=None) -> Schedule:
    """A schedule from ("c", op) and ("f", storage) pairs."""
    return Schedule([0 if k == "c" else 1 for k, _ in events], [x for _, x in events], program.sha256,
                    made_by, budget_bytes)


def computes(*ops):
    return [("c", o) for o in ops]
