"""output.Ticker: in a log, a line at most every PERIOD_S seconds and one at the end (no stage of
a long job is silent for long there); on a terminal without a bar, nothing."""

from __future__ import annotations

import io
import time

from rich.console import Console

from dtrlab.output import Ticker


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=terminal, width=200, color_system=None), buf


def test_a_log_gets_a_line_every_period_and_one_at_the_end(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    out, buf = _console(terminal=False)
    with Ticker(out, "runs", 7) as ticker:
        for k in range(7):
            now[0] += 0.9
            ticker.tick(f"run {k}")
    # ticks at 0.9, 1.8, 2.7 (2 s since the start: a line), 3.6, 4.5, 5.4 (2.7 s since: a line), 6.3,
    # then the end (a line)
    assert buf.getvalue().splitlines() == ["  runs: 3/7 (run 2), 3 s", "  runs: 6/7 (run 5), 5 s",
                                           "  runs: 7/7 (run 6), 6 s"]


def test_the_end_is_not_said_twice_and_nothing_is_said_of_nothing(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    out, buf = _console(terminal=False)
    with Ticker(out, "figures") as ticker:
        now[0] += 2.5
        ticker.tick("a")
    with Ticker(out, "none"):
        pass
    assert buf.getvalue().splitlines() == ["  figures: 1 (a), 2 s"]


def test_a_terminal_without_a_bar_gets_nothing():
    out, buf = _console(terminal=True)
    with Ticker(out, "runs", 3, bar=False) as ticker:
        for _ in range(3):
            ticker.tick()
    assert buf.getvalue() == ""
