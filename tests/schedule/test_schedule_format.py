"""The schedule file: what the writer writes reads back the same; what another tool writes in the
documented spelling reads too; a bad file is one `path:line: reason`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedule_cases import schedule, view_program
from dtrlab.errors import UsageError
from dtrlab.schedule import COMPUTE, FREE, Schedule, ScheduleFileError, read_schedule, write_schedule

SHA = "ab" * 32

schedules = st.builds(
    lambda events, made_by, budget: Schedule([k for k, _ in events], [t for _, t in events], SHA, made_by, budget),
    st.lists(st.tuples(st.sampled_from((COMPUTE, FREE)), st.integers(0, 2**31 - 1)), max_size=50),
    st.text(max_size=20),
    st.none() | st.integers(0, 2**63 - 1),
)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(schedules)
def test_write_then_read_gives_the_same_schedule(tmp_path_factory, sched):
    path = tmp_path_factory.mktemp("s") / "s.jsonl"
    write_schedule(sched, path)
    back = read_schedule(path)
    assert back.equals(sched)
    assert back.kind.dtype == np.int8 and back.target.dtype == np.int32


def test_the_file_is_a_header_line_then_one_event_a_line(tmp_path):
    p = view_program()
    path = tmp_path / "s.jsonl"
    write_schedule(schedule(p, ("c", 0), ("c", 1), ("f", 1), budget_bytes=300), path, extra={"trace": "view"})
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    assert head == {"format": "dtrlab-schedule", "version": 1, "trace_sha256": p.sha256, "made_by": "hand",
                    "budget_bytes": 300, "events": 3, "trace": "view"}
    assert [json.loads(x) for x in lines[1:]] == [{"compute": 0}, {"compute": 1}, {"free": 1}]


def test_another_tools_spelling_reads(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"format": "dtrlab-schedule", "version": 1, "trace_sha256": SHA,
                                "made_by": "optimal:test", "solver": "extra keys are ignored"}) + "\n"
                    + '{ "compute" : 3 }\n\n  {"free": 2}  \n{"compute":1}')
    s = read_schedule(path)
    assert s.events() == [("compute", 3), ("free", 2), ("compute", 1)]
    assert (s.made_by, s.budget_bytes) == ("optimal:test", None)


HEAD = '{"format": "dtrlab-schedule", "version": 1, "trace_sha256": "' + SHA + '", "made_by": "x"}'


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty file"),
    ("not json\n", 1, "header is not JSON"),
    ('{"format": "other"}\n', 1, "not a schedule"),
    (HEAD.replace('"version": 1', '"version": 2') + "\n", 1, "version 2 is not known"),
    (HEAD.replace(SHA, "abc") + "\n", 1, "trace_sha256"),
    (HEAD.replace('"x"', "3") + "\n", 1, "made_by"),
    (HEAD[:-1] + ', "budget_bytes": -1}\n', 1, "budget_bytes"),
    (HEAD + '\n{"compute": 1}\n{"compute": -1}\n', 3, "non-negative integer"),
    (HEAD + '\n{"compute": 1.5}\n', 2, "non-negative integer"),
    (HEAD + '\n{"compute": true}\n', 2, "non-negative integer"),
    (HEAD + '\n{"compute": 2147483648}\n', 2, "below 2^31"),
    (HEAD + '\n{"evict": 1}\n', 2, "unknown event 'evict'"),
    (HEAD + '\n{"compute": 1, "free": 2}\n', 2, "one key"),
    (HEAD + '\n[0, 1]\n', 2, "one key"),
    (HEAD + '\n{"compute": 1\n', 2, "must be JSON"),
    (HEAD[:-1] + ', "events": 2}\n{"compute": 1}\n', 3, "says 2 events but the file has 1"),
])
def test_a_bad_file_is_one_line_with_its_line_number(tmp_path, text, line, words):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ScheduleFileError) as info:
        read_schedule(path)
    e = info.value
    assert (e.path, e.line) == (str(path), line) and words in e.reason, str(e)
    assert str(e) == f"{path}:{line}: {e.reason}" and "\n" not in str(e)


def test_a_missing_file_and_a_binary_file(tmp_path):
    with pytest.raises(UsageError, match=r"nope.jsonl: cannot read the schedule: No such file"):
        read_schedule(tmp_path / "nope.jsonl")
    path = tmp_path / "bin.jsonl"
    path.write_bytes(HEAD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(ScheduleFileError, match=r":2: not UTF-8"):
        read_schedule(path)


def test_a_schedule_takes_lists_and_refuses_unknown_kinds():
    s = Schedule([0, 1], [3, 4], SHA, "hand")
    assert s.kind.dtype == np.int8 and s.target.dtype == np.int32 and len(s) == 2
    with pytest.raises(ValueError, match="COMPUTE"):
        Schedule([2], [0], SHA, "hand")
    with pytest.raises(ValueError, match="one length"):
        Schedule([0, 0], [0], SHA, "hand")
    for bad in ([-1], [2**31], [1.5]):
        with pytest.raises(ValueError, match="targets are integers"):
            Schedule([0], bad, SHA, "hand")
    assert len(Schedule([], [], SHA, "hand")) == 0
