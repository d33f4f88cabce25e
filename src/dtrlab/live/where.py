"""Where in a user's step the live runtime is: the user's line of code that issued the operator in
flight, and the part of the step it belongs to; the one-line errors name it.

Owns the reading of the Python stack: the innermost frame that is neither PyTorch's, nor the live
runtime's, nor the standard library's is the user's (a zoo step's own code counts as the user's).
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from dataclasses import dataclass

import torch

SOURCE_CHARS = 48  # a line of the user's code is quoted up to this many characters


def _dir(path: str) -> str:
    return os.path.normcase(os.path.realpath(path)) + os.sep


_SKIPPED = (_dir(os.path.dirname(torch.__file__)),   # PyTorch: the API the user called
            _dir(os.path.dirname(__file__)))         # the live runtime
_STDLIB = _dir(sysconfig.get_paths()["stdlib"])      # contextlib, functools, ...
_OPTIM = _dir(os.path.join(os.path.dirname(torch.__file__), "optim"))
_PACKAGES = tuple(_dir(sysconfig.get_paths()[k]) for k in ("purelib", "platlib"))  # may lie under _STDLIB


@dataclass(frozen=True)
class Where:
    """A line of the user's code: its file (as Python knows it), line number and text, the
    function it is in, whether the autograd engine was running the backward pass, and whether a
    PyTorch optimizer's code was running below the user's line."""

    path: str
    line: int
    function: str
    source: str
    backward: bool
    optimizer: bool = False

    def short(self) -> str:
        """`file.py:14 (the line's code)`: the file's base name, the line quoted if short enough."""
        text = self.source if len(self.source) <= SOURCE_CHARS else self.source[:SOURCE_CHARS - 3] + "..."
        quoted = f" ({text})" if text else ""
        return f"{os.path.basename(self.path)}:{self.line}{quoted}"

    def phase(self) -> str:
        """The part of the step: the backward pass, the optimizer's step, or "" (neither)."""
        if self.backward:
            return "in the backward pass"
        return "in the optimizer's step" if self.optimizer else ""

    def describe(self) -> str:
        """`at file.py:14 (its code), in the backward pass`."""
        phase = self.phase()
        return f"at {self.short()}" + (f", {phase}" if phase else "")

    def long(self) -> str:
        return f"{self.path}:{self.line} in {self.function}: {self.source}"


def _skipped(path: str) -> bool:
    if path.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return True
    full = os.path.normcase(os.path.realpath(path))
    if full.startswith(_SKIPPED):
        return True
    return full.startswith(_STDLIB) and not full.startswith(_PACKAGES)


_known: dict[str, bool] = {}  # a file's path -> whether it is skipped (realpath is slow)


def user_frame(outer=None) -> Where | None:
    """The user's line of code running now (None when no frame is the user's), looked for up to
    the frame `outer` (the one that entered the live session), if given."""
    frame = sys._getframe(1)
    optimizer = False
    while frame is not None:
        path = frame.f_code.co_filename
        skip = _known.get(path)
        if skip is None:
            skip = _known[path] = _skipped(path)
        if not skip:
            source = linecache.getline(path, frame.f_lineno).strip()
            return Where(path, frame.f_lineno, frame.f_code.co_name, source,
                         torch._C._current_graph_task_id() != -1, optimizer)
        optimizer = optimizer or os.path.normcase(os.path.realpath(path)).startswith(_OPTIM)
        if frame is outer:
            break
        frame = frame.f_back
    return None
