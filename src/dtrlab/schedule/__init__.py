"""Schedules as data: the format (format.py), the checker (check.py) and a simulation's schedule (emit.py).

Imports only trace/, sim/ and dtrlab's top-level helpers; solvers and staged steps import it, never each other.
"""

from .check import HEADER, Replay, ScheduleError, check_schedule
from .format import COMPUTE, FREE, Schedule, ScheduleFileError, read_schedule, write_schedule

__all__ = ["COMPUTE", "FREE", "HEADER", "Replay", "Schedule", "ScheduleError", "ScheduleFileError",
           "check_schedule", "read_schedule", "write_schedule"]
