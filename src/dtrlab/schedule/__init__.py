"""Schedules as data: the format (format.py), the checker (check.py) and a simulation's schedule (emit.py).

Imports only trace/, sim/ and dtrlab's top-level helpers; solvers and staged steps import it, never each other.
"""

from __future__ import annotations

import importlib

# The public names, by module: loaded on first use, so the CLI's start-up (which registers
# `dtrlab schedule` from commands.py) loads no numpy.
_EXPORTS = {
    "COMPUTE": "format", "FREE": "format", "Schedule": "format", "ScheduleFileError": "format",
    "read_schedule": "format", "write_schedule": "format",
    "HEADER": "check", "Replay": "check", "ScheduleError": "check", "check_schedule": "check",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
