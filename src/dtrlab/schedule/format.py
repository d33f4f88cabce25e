"""A schedule as data: the Schedule value and its file format (a JSON header line, then one event a line).

Owns the on-disk spelling and its syntax checks; what a schedule means is check.py's (docs/schedules.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DtrlabError, UsageError

# Event kinds. COMPUTE's target is an operator (a first computation or a recomputation: which one
# follows from the order); FREE's is a storage.
COMPUTE, FREE = 0, 1
KIND_WORDS = ("compute", "free")  # the file's key for each kind, by code

FORMAT_NAME = "dtrlab-schedule"
FORMAT_VERSION = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ScheduleFileError(DtrlabError):
    """A schedule file that cannot be read: `path:line: reason`."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


@dataclass(frozen=True, eq=False)
class Schedule:
    """An ordered list of events over one trace's operators and storages: kind[i] (COMPUTE or FREE)
    acts on target[i] (an operator index for COMPUTE, a storage index for FREE).

    trace_sha256: the sha256 of the trace it was made for (Program.sha256); made_by: its maker
    ("dtr/eager-optimized", "optimal:highs", "hand"); budget_bytes: the budget it was made for
    (None: unbounded or not said). Lists are taken too: they become int8 / int32 arrays."""

    kind: np.ndarray  # int8: COMPUTE or FREE
    target: np.ndarray  # int32
    trace_sha256: str
    made_by: str
    budget_bytes: int | None = None

    def __post_init__(self) -> None:
        kind, target = np.asarray(self.kind), np.asarray(self.target)
        if kind.ndim != 1 or kind.shape != target.shape:
            raise ValueError(f"kind and target must be 1-d and of one length, got {kind.shape} and {target.shape}")
        if kind.size and not np.isin(kind, (COMPUTE, FREE)).all():
            raise ValueError("a schedule's kinds are COMPUTE (0) and FREE (1)")
        if target.size and not (target.dtype.kind in "iu" and 0 <= target.min() and target.max() < 2**31):
            raise ValueError("a schedule's targets are integers in [0, 2^31)")
        kind = np.ascontiguousarray(kind, dtype=np.int8)
        target = np.ascontiguousarray(target, dtype=np.int32)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "target", target)

    def __len__(self) -> int:
        return len(self.kind)

    def equals(self, other: "Schedule") -> bool:
        """The same events and the same header."""
        return (np.array_equal(self.kind, other.kind) and np.array_equal(self.target, other.target)
                and (self.trace_sha256, self.made_by, self.budget_bytes)
                == (other.trace_sha256, other.made_by, other.budget_bytes))

    def events(self) -> list[tuple[str, int]]:
        """(kind word, target) per event: ("compute", 12), ("free", 3)."""
        return [(KIND_WORDS[k], t) for k, t in zip(self.kind.tolist(), self.target.tolist())]


def header_of(schedule: Schedule, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The header line's object; `extra` adds keys a reader ignores (a trace name, an outcome)."""
    head = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "trace_sha256": schedule.trace_sha256,
            "made_by": schedule.made_by, "budget_bytes": schedule.budget_bytes, "events": len(schedule)}
    for key, value in (extra or {}).items():
        head.setdefault(key, value)
    return head


def write_schedule(schedule: Schedule, path: str | Path, extra: dict[str, Any] | None = None) -> None:
    """Write `schedule` to `path`: the header line, then `{"compute": OP}` or `{"free": STORAGE}` a line."""
    words = [f'{{"{w}":' for w in KIND_WORDS]
    lines = [json.dumps(header_of(schedule, extra), separators=(",", ":"))]
    lines.extend(f"{words[k]}{t}}}" for k, t in zip(schedule.kind.tolist(), schedule.target.tolist()))
    try:
        Path(path).write_text("\n".join(lines) + "\n")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the schedule: {exc.strerror or exc}") from None


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _header(path: str, text: str) -> dict[str, Any]:
    try:
        head = json.loads(text)
    except ValueError as exc:
        raise ScheduleFileError(path, 1, f"the header is not JSON ({exc.msg})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT_NAME:
        raise ScheduleFileError(path, 1, f'not a schedule: the first line must be a JSON object with "format": "{FORMAT_NAME}"')
    if head.get("version") != FORMAT_VERSION:
        raise ScheduleFileError(path, 1, f"schedule format version {head.get('version')!r} is not known "
                                         f"(this dtrlab reads version {FORMAT_VERSION})")
    sha = head.get("trace_sha256")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise ScheduleFileError(path, 1, '"trace_sha256" must be the trace\'s sha256: 64 lowercase hex digits')
    if not isinstance(head.get("made_by"), str):
        raise ScheduleFileError(path, 1, '"made_by" must be a string (who made the schedule)')
    budget = head.get("budget_bytes")
    if budget is not None and not (_int(budget) and budget >= 0):
        raise ScheduleFileError(path, 1, f'"budget_bytes" must be a non-negative integer or null, got {budget!r}')
    count = head.get("events")
    if count is not None and not (_int(count) and count >= 0):
        raise ScheduleFileError(path, 1, f'"events" must be a non-negative integer, got {count!r}')
    return head


def _event(path: str, line: int, text: str) -> tuple[int, int]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise ScheduleFileError(path, line, f"an event must be JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ScheduleFileError(path, line, 'an event is an object with one key: {"compute": OP} or {"free": STORAGE}')
    ((word, target),) = obj.items()
    if word not in KIND_WORDS:
        raise ScheduleFileError(path, line, f'unknown event {word!r} (known: "compute", "free")')
    if not (_int(target) and 0 <= target < 2**31):
        raise ScheduleFileError(path, line, f"{word}'s target must be a non-negative integer below 2^31, got {target!r}")
    return KIND_WORDS.index(word), target


def read_schedule(path: str | Path) -> Schedule:
    """The schedule in `path`; a malformed file raises ScheduleFileError(path, line, reason), one
    that cannot be read a UsageError.

    Only the syntax is checked here: whether the events make sense for a trace is check_schedule's."""
    return read_schedule_lines(path)[0]


def read_schedule_lines(path: str | Path) -> tuple[Schedule, list[int]]:
    """read_schedule, and the file's line number of each event (blank lines are skipped), so a
    checker's event index can be said as a line."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{name}: cannot read the schedule: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ScheduleFileError(name, line, "not UTF-8 text") from None
    lines = text.split("\n")
    if not lines[0].strip():
        raise ScheduleFileError(name, 1, "empty file: a schedule starts with its header line")
    head = _header(name, lines[0])
    kinds, targets, numbers = [], [], []
    # A fast path for the writer's own spelling; anything else goes through JSON.
    compute_prefix, free_prefix = '{"compute":', '{"free":'
    for number, raw in enumerate(lines[1:], start=2):
        s = raw.strip()
        if not s:
            continue
        if s.startswith(compute_prefix) and s.endswith("}") and _digits(s[11:-1]):
            kind, target = COMPUTE, int(s[11:-1])
        elif s.startswith(free_prefix) and s.endswith("}") and _digits(s[8:-1]):
            kind, target = FREE, int(s[8:-1])
        else:
            kind, target = _event(name, number, s)
        if target >= 2**31:
            raise ScheduleFileError(name, number, f"the target must be below 2^31, got {target}")
        kinds.append(kind)
        targets.append(target)
        numbers.append(number)
    count = head.get("events")
    if count is not None and count != len(kinds):
        raise ScheduleFileError(name, len(lines), f"the header says {count} events but the file has {len(kinds)} "
                                                  "(a truncated or edited file?)")
    return Schedule(np.array(kinds, np.int8), np.array(targets, np.int32), head["trace_sha256"],
                    head["made_by"], head.get("budget_bytes")), numbers
