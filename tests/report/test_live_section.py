"""The report's live section: the zoo's steps run live beside their simulations, rendered."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dtrlab.report.html import _env
from dtrlab.report.live import LIVE_RATIOS, MEASURED_RATIO, LiveRow, LiveSection, live_section


def _render(section) -> tuple[str, str]:
    ctx = dict(repro=SimpleNamespace(live=section), overhead=lambda x: "n/a" if x is None else f"{x:.3f}")
    return (_env(True).get_template("live.html.j2").render(**ctx),
            _env(False).get_template("live.md.j2").render(**ctx))


def test_live_rows_are_the_live_runtime_beside_simulate(monkeypatch):
    """One zoo model (the U-Net) through the section: a row per logical ratio and one measured; on the
    logical clock every row makes the simulation's decisions (the counts are the simulation's), and
    the rendered tables carry them."""
    pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")
    from dtrlab.capture import zoo

    monkeypatch.setattr(zoo, "ZOO", {"unet": zoo.ZOO["unet"]})
    section = live_section()
    assert [(r.clock, r.ratio) for r in section.rows] == [("logical", r) for r in LIVE_RATIOS] + [
        ("measured", MEASURED_RATIO)]
    logical = [r for r in section.rows if r.clock == "logical"]
    assert section.logical_all_same and all(r.same_decisions for r in logical)
    assert all((r.live_evictions, r.live_remats, r.live_overhead) == (r.sim_evictions, r.sim_remats, r.sim_overhead)
               for r in logical)
    assert any(r.live_evictions > 0 for r in logical) and all(r.wall_ratio > 0 for r in section.rows)
    html, md = _render(section)
    assert html.count("<tr><td>unet</td>") == len(section.rows) and "It made them in every logical row" in html
    assert md.count("| unet | logical |") == len(LIVE_RATIOS) and "| unet | measured |" in md
    assert "its own clock" in md


def test_without_torch_or_a_plan_the_section_says_so():
    html, md = _render(LiveSection((), None))
    assert "torch is not installed" in html and "torch is not installed" in md
    html, md = _render(None)
    assert "This plan runs no live steps" in html and "This plan runs no live steps" in md
    row = LiveRow("lstm", "logical", 0.8, 1000, "ok", "ok", 1, 2, 1, 1, 1.5, 1.5, False, False, 3.0)
    html, _ = _render(LiveSection((row,), "2.x"))
    assert "Some logical rows differ" in html
