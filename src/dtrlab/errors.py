"""The user-facing errors of dtrlab: each one is a mistake in the input, printed as one line.

A bug in dtrlab is any other exception, and it keeps its traceback.
"""

from __future__ import annotations


class DtrlabError(Exception):
    """A user's mistake: the CLI prints `str(error)` on one line and exits 2."""


class TraceError(DtrlabError):
    """A trace that cannot be read: carries the path, the 1-based line number and why."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class UsageError(DtrlabError):
    """A bad argument: unknown policy or runtime, a budget out of range, a missing file."""


class UserCodeError(DtrlabError):
    """The user's own code (a step factory, its step, the script) is wrong or raised: one line
    `file:line: what`, and the user's frames as text (`frames`, empty when nothing of theirs
    raised). Raised from the user's exception, whose whole traceback `dtrlab --debug` prints."""

    def __init__(self, line: str, frames: str = "") -> None:
        super().__init__(line)
        self.frames = frames
