"""A rerun of `reproduce` into its own folder simulates nothing, runs no live step and draws no figure
again, and writes the same bytes; what changed is done again: a figure whose file is gone is drawn,
and the live section runs again on another machine (its key is what decides it)."""

from __future__ import annotations

import platform
from dataclasses import replace

import pytest
from rich.console import Console

from dtrlab.report import live, plots
from dtrlab.report.pipeline import reproduce
from dtrlab.report.plan import QUICK

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")


def _run(out):
    return reproduce(None, out, plan=replace(QUICK, live=True), progress=False, workers=2,
                     console=Console(file=open("/dev/null", "w")))


def _files(out):
    return {p.relative_to(out): p.read_bytes() for p in [out / "report.html", out / "summary.md",
                                                         *sorted((out / "figures").iterdir())]}


@pytest.mark.slow
def test_a_rerun_runs_no_live_step_draws_no_figure_and_writes_the_same_bytes(tmp_path, monkeypatch):
    from dtrlab.capture import zoo

    monkeypatch.setattr(zoo, "ZOO", {"unet": zoo.ZOO["unet"]})
    out = tmp_path / "report"
    first = _run(out)
    assert first.live is not None and first.live.rows and first.new_runs > 0
    before = _files(out)

    drawn, lived = [], []
    save = plots.save
    monkeypatch.setattr(plots, "save", lambda fig, folder, name: (drawn.append(name), save(fig, folder, name))[1])
    section = live.live_section
    monkeypatch.setattr(live, "live_section", lambda tick: (lived.append(1), section(tick))[1])
    again = _run(out)
    assert again.new_runs == 0 and drawn == [] and lived == []
    assert again.live == first.live
    assert _files(out) == before

    gone = sorted(first.figures)[0]
    (out / "figures" / f"{gone}.png").unlink()
    _run(out)
    assert drawn == [gone] and lived == [] and _files(out) == before

    monkeypatch.setattr(platform, "node", lambda: "another-machine")
    _run(out)
    assert lived == [1]
