"""Small programs whose behaviour is known by construction, built through the real reader."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))

from helpers import program_of, synthetic_program  # noqa: E402

from dtrlab.trace.read import Alias, Call, Constant, Memory, Release  # noqa: E402


class _Writer:
    def __init__(self) -> None:
        self.out = []

    def add(self, make, *fields) -> None:
        self.out.append(make(len(self.out) + 1, *fields))

    def constant(self, name: str, size_bytes: int) -> None:
        self.add(Constant, name)
        self.add(Memory, name, size_bytes)

    def call(self, op: str, args: tuple[str, ...], out: str, size_bytes: int, time_ns: int) -> None:
        self.add(Call, op, args, (out,), time_ns)
        self.add(Memory, out, size_bytes)
        self.add(Alias, out, -1)


def chain_program(n: int, size_bytes: int = 100, time_ns: int = 10, release: tuple[int, ...] = ()):
    """A constant w (size_bytes) and x1 = f(w), x2 = f(x1), ..., xn = f(x(n-1)), each size_bytes;
    the x_i in `release` are released right after x(i+1) is computed."""
    w = _Writer()
    w.constant("w", size_bytes)
    prev = "w"
    for i in range(1, n + 1):
        w.call(f"f{i}", (prev,), f"x{i}", size_bytes, time_ns)
        if i - 1 in release:
            w.add(Release, f"x{i - 1}")
        prev = f"x{i}"
    return program_of(w.out, f"chain-{n}")


def fan_program(k: int, size_bytes: int = 100, time_ns: int = 10):
    """w, then a1..ak = g_i(w) all kept, then y = h(a1, ..., ak): h's inputs all stay locked."""
    w = _Writer()
    w.constant("w", size_bytes)
    names = []
    for i in range(1, k + 1):
        w.call(f"g{i}", ("w",), f"a{i}", size_bytes, time_ns)
        names.append(f"a{i}")
    w.call("h", tuple(names), "y", size_bytes, time_ns)
    return program_of(w.out, f"fan-{k}")


__all__ = ["chain_program", "fan_program", "program_of", "synthetic_program"]
