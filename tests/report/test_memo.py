"""The report's memo: an entry is reused only for its own key, under today's semantics version and
today's dataclasses; anything else (damaged, foreign, stale) is recomputed, never trusted."""

from __future__ import annotations

import dataclasses
import pickle
import zlib

import pytest

import dtrlab.report.memo as memo_module
from dtrlab.report.memo import memo


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str
    value: int


def _counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def _entry(folder):
    (path,) = (folder / "analyses").glob("*.pickle")
    return path


def test_a_second_call_reads_the_stored_value(tmp_path):
    compute, calls = _counting((Figure("a", 1), [Figure("b", 2)]))
    first = memo(tmp_path, "figs", {"trace": "x"}, compute)
    again = memo(tmp_path, "figs", {"trace": "x"}, compute)
    assert again == first and len(calls) == 1
    assert memo(tmp_path, "figs", {"trace": "y"}, compute) == first and len(calls) == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "bare value", "other key"])
def test_a_damaged_or_foreign_entry_is_recomputed(tmp_path, damage):
    compute, calls = _counting(Figure("a", 1))
    memo(tmp_path, "figs", {"trace": "x"}, compute)
    path = _entry(tmp_path)
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x80\x04not a pickle", "empty": b"",
                      "bare value": pickle.dumps(Figure("forged", 9)),
                      "other key": pickle.dumps(("{}", Figure("forged", 9)))}[damage])
    assert memo(tmp_path, "figs", {"trace": "x"}, compute) == Figure("a", 1)
    assert len(calls) == 2
    assert memo(tmp_path, "figs", {"trace": "x"}, compute) == Figure("a", 1) and len(calls) == 2  # rewritten


def test_entries_are_compressed_and_an_earlier_plain_entry_is_read(tmp_path):
    value = [Figure(str(i), i) for i in range(2000)]  # alike entries: compression pays
    compute, calls = _counting(value)
    memo(tmp_path, "figs", {"trace": "x"}, compute)
    path = _entry(tmp_path)
    canonical, _ = pickle.loads(zlib.decompress(path.read_bytes()))
    assert path.stat().st_size < len(pickle.dumps((canonical, value))) / 2
    path.write_bytes(pickle.dumps((canonical, value)))  # as the memo wrote it before compressing
    assert memo(tmp_path, "figs", {"trace": "x"}, compute) == value and len(calls) == 1


def test_a_semantics_bump_recomputes(tmp_path, monkeypatch):
    compute, calls = _counting(Figure("a", 1))
    memo(tmp_path, "figs", {"trace": "x"}, compute)
    monkeypatch.setattr(memo_module, "SEMANTICS_VERSION", memo_module.SEMANTICS_VERSION + 1)
    memo(tmp_path, "figs", {"trace": "x"}, compute)
    assert len(calls) == 2


def test_an_entry_of_a_changed_dataclass_is_recomputed(tmp_path, monkeypatch):
    """An entry pickled before a field was added unpickles into an instance without that field."""
    compute, calls = _counting((Figure("a", 1),))
    memo(tmp_path, "figs", {"trace": "x"}, compute)

    @dataclasses.dataclass(frozen=True)
    class Figure2:  # what Figure became: one more field
        name: str
        value: int
        unit: str = "B"

    Figure2.__qualname__ = Figure.__qualname__
    monkeypatch.setitem(globals(), "Figure", Figure2)
    new, new_calls = _counting((Figure2("a", 1),))
    assert memo(tmp_path, "figs", {"trace": "x"}, new) == (Figure2("a", 1),)
    assert len(new_calls) == 1
