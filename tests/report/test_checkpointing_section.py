"""The report's checkpointing section (`dtrlab reproduce --checkpointing`): its figure on hand-made points,
its tables rendered, the flag on the command line, and one run end to end on a tiny zoo model."""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")  # compare.Point's label is compare.Mode's

from conftest import cli_invoke  # noqa: E402

import dtrlab  # noqa: E402
from dtrlab.compare import Point  # noqa: E402
from dtrlab.compare.matched import DTR_LOSES, DTR_WINS, NONE_FITS, at_matched_memory  # noqa: E402
from dtrlab.report import plots  # noqa: E402
from dtrlab.report.checkpointing import CheckpointingSection, ModelRun  # noqa: E402
from dtrlab.report.html import _env  # noqa: E402

MIB = 1024 * 1024
DOCS = Path(__file__).resolve().parents[2] / "docs"
TINY = Path(dtrlab.__file__).parent / "data" / "examples" / "tiny.jsonl"


def _point(model, mode, setting, peak_mib, step_ms, kind="storages", skipped=""):
    peak = None if peak_mib is None else int(peak_mib * MIB)
    return Point(model, mode, setting, peak, None if step_ms is None else step_ms / 1e3, kind, 1.0, skipped)


TRANSFORMER = (_point("transformer", "plain", None, 4.0, 10.0), _point("transformer", "checkpoint", None, 2.0, 14.0),
               _point("transformer", "staged", 0.8, 3.0, 16.0), _point("transformer", "staged", 1.0, 5.0, 9.0),
               _point("transformer", "staged", 0.5, None, None, skipped="the step does not fit"),
               _point("transformer", "compile", 0.9, 3.5, 8.0, "allocator"),
               _point("transformer", "compile", 0.1, 2.5, 9.0, "allocator"),
               _point("transformer", "compile-dtr", 1.0, 3.0, 7.0, "allocator"),
               _point("transformer", "compile-dtr", 0.9, 2.0, 9.5, "allocator"))
LSTM = (_point("lstm", "plain", None, 1.0, 5.0), _point("lstm", "checkpoint", None, None, None, skipped="no blocks"),
        _point("lstm", "staged", 1.0, 1.5, 6.0))
RESULTS = {"transformer": (TRANSFORMER, int(4.5 * MIB)), "lstm": (LSTM, None)}


def _lines(ax) -> dict:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_a_panel_a_model_and_a_curve_a_mode_by_peak():
    fig = plots.checkpointing_curves(RESULTS)
    try:
        shown = [ax for ax in fig.axes if ax.get_visible()]
        assert [ax.get_title() for ax in shown] == ["transformer", "lstm"]
        assert all((ax.get_xlabel(), ax.get_ylabel()) == ("measured peak (MiB)", "median step (ms)") for ax in shown)
        transformer, lstm = (_lines(ax) for ax in shown)
        assert transformer == {
            "plain": ([4.0], [10.0]), "checkpoint": ([2.0], [14.0]),
            "staged": ([3.0, 5.0], [16.0, 9.0]),  # by peak; 0.5 did not fit: no point
            "compile (allocator count)": ([2.5, 3.5], [9.0, 8.0]),
            "compile-dtr (allocator count)": ([2.0, 3.0], [9.5, 7.0]),
            "plain (allocator count)": ([4.5], [10.0])}
        assert lstm == {"plain": ([1.0], [5.0]), "staged": ([1.5], [6.0])}  # checkpoint skipped: no curve
        compiled = next(ln for ln in shown[0].get_lines() if ln.get_gid() == "compile")
        assert compiled.get_markerfacecolor() == "none"
        (legend,) = [ax.get_legend() for ax in shown if ax.get_legend() is not None]
        assert [t.get_text() for t in legend.get_texts()] == ["plain", "checkpoint", "staged",
                                                              "compile (allocator count)",
                                                              "compile-dtr (allocator count)", "plain (allocator count)"]
        settings = {t.get_text() for t in shown[0].texts}
        assert settings == {"0.8", "1", "0.9", "0.1"}
    finally:
        plots.plt.close(fig)
    fig = plots.checkpointing_curves({"tiny": ((_point("tiny", "plain", None, 0.5, 1.0),), None)})
    try:  # no peak reaches a MiB: KiB
        (ax,) = fig.axes
        assert ax.get_xlabel() == "measured peak (KiB)" and _lines(ax) == {"plain": ([512.0], [1.0])}
    finally:
        plots.plt.close(fig)


def _section(torch="2.x") -> CheckpointingSection:
    runs = (ModelRun("transformer", "a Transformer", TRANSFORMER, int(4.5 * MIB)),
            ModelRun("lstm", "an LSTM", LSTM, None))
    matched = tuple(m for r in runs for m in at_matched_memory(r.points))
    return CheckpointingSection(runs, matched, torch, 3, 1)


def _render(section) -> tuple[str, str]:
    repro = SimpleNamespace(checkpointing=section)
    return (_env(True).get_template("checkpointing.html.j2").render(repro=repro, figures={}),
            _env(False).get_template("checkpointing.md.j2").render(repro=repro, figures={}))


def test_the_tables_give_every_verdict_and_no_section_when_not_asked():
    section = _section()
    # transformer plain (4 MiB, 10 ms): staged 0.8 (3 MiB) at 16 ms loses; checkpoint (2 MiB): none fits;
    # compile 0.9 (3.5 MiB, 8 ms): compile-dtr 1.0 (3 MiB) at 7 ms wins; compile 0.1 (2.5 MiB, 9 ms): only
    # compile-dtr 0.9 (2 MiB) fits, at 9.5 ms: a loss; lstm plain (1 MiB): staged 1.0 is 1.5 MiB, none fits.
    assert [(m.model, m.label, m.staged, m.verdict) for m in section.matched] == [
        ("transformer", "plain", "staged 0.8", DTR_LOSES), ("transformer", "checkpoint", None, NONE_FITS),
        ("transformer", "compile 0.9", "compile-dtr 1", DTR_WINS),
        ("transformer", "compile 0.1", "compile-dtr 0.9", DTR_LOSES), ("lstm", "plain", None, NONE_FITS)]
    assert section.tally == {DTR_WINS: 1, DTR_LOSES: 2, NONE_FITS: 2} and section.compiled_models == ("transformer",)
    html, md = _render(section)
    assert ("<tr><td>transformer</td><td>plain</td><td class=\"num\">4,096.0</td><td class=\"num\">10.00</td>\n"
            "<td>staged 0.8</td><td class=\"num\">3,072.0</td><td class=\"num\">16.00</td>\n"
            "<td class=\"num\">1.60x</td><td>DTR loses</td></tr>") in html
    assert "| transformer | plain | 4,096.0 | 10.00 | staged 0.8 | 3,072.0 | 16.00 | 1.60x | DTR loses |" in md
    assert "| lstm | plain | 1,024.0 | 5.00 | - | - | - | - | no DTR step fits |" in md
    assert "| transformer | compile 0.9 | 3,584.0 | 8.00 | compile-dtr 1 | 3,072.0 | 7.00 | 0.88x | DTR wins |" in md
    assert "DTR wins: 1; DTR loses: 2; no DTR step fits: 2." in md and "no blocks" in html
    html, md = _render(_section(torch=None))
    assert "torch is not installed" in html and "torch is not installed" in md and "<table" not in html
    assert _render(None) == ("", "")


def test_without_torch_the_section_runs_nothing(monkeypatch):
    from dtrlab.report import checkpointing

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, as where it is not installed
    ticks = []
    section = checkpointing.checkpointing_section(ticks.append)
    assert (section.runs, section.matched, section.torch, ticks) == ((), (), None, [])
    assert checkpointing.default_setups() == () and checkpointing.decided_by()["setups"] == []


def test_the_flag_is_documented_and_reaches_reproduce(monkeypatch, tmp_path):
    from dtrlab.report import pipeline

    help_text = " ".join(cli_invoke("reproduce", "--help", check=True).stdout.split())
    assert "--checkpointing" in help_text and "needs torch; takes several minutes" in help_text
    assert "dtrlab reproduce --checkpointing" in (DOCS / "report.md").read_text()
    assert "dtrlab reproduce --checkpointing" in (DOCS / "checkpointing.md").read_text()
    given = {}

    def fake(*args, **kwargs):
        given.update(kwargs)
        return SimpleNamespace(out_dir=tmp_path, new_runs=0, frame=(), new_solves=0, wall_s=0.0, claims=(), beside=(),
                               curves={}, traces=(), checkpointing=_section() if kwargs["checkpointing"] else None)
    monkeypatch.setattr(pipeline, "reproduce", fake)
    got = json.loads(cli_invoke("reproduce", "--checkpointing", "--json", check=True).stdout)
    assert given["checkpointing"] is True
    first = got["checkpointing"][0]
    assert (first["model"], first["label"], first["verdict"]) == ("transformer", "plain", DTR_LOSES)
    assert first["step_ratio"] == pytest.approx(1.6)
    got = json.loads(cli_invoke("reproduce", "--json", check=True).stdout)
    assert given["checkpointing"] is False and "checkpointing" not in got


@pytest.mark.slow
def test_the_section_end_to_end_on_a_tiny_model(monkeypatch, tmp_path):
    """reproduce --checkpointing on the tiny example trace, the section on U-Net at its tiny sizes in four
    modes: its points, the rows at matched memory, the figure and both tables written, kept in the memo."""
    from rich.console import Console

    from dtrlab.capture.zoo import ZOO
    from dtrlab.report import checkpointing
    from dtrlab.report.memo import code_digest, stored
    from dtrlab.report.pipeline import reproduce
    from dtrlab.report.plan import QUICK

    modes = (("plain", None), ("checkpoint", None), ("staged", 1.0), ("staged", 0.9))
    setup = checkpointing.ModelSetup("unet", ZOO["unet"].tiny, modes)
    monkeypatch.setattr(checkpointing, "default_setups", lambda: (setup,))
    log = io.StringIO()
    repro = reproduce(str(TINY), tmp_path / "r", plan=replace(QUICK, policies=("dtr",)), workers=1, progress=False,
                      console=Console(file=log, width=200), checkpointing=True)
    section = repro.checkpointing
    assert section.torch is not None and [r.model for r in section.runs] == ["unet"]
    points = section.points
    assert [p.label for p in points] == ["plain", "checkpoint", "staged 1", "staged 0.9"]
    assert all(p.peak_bytes > 0 and p.step_s > 0 for p in points[:3])  # U-Net has blocks; 1.0 always fits
    assert [m.label for m in section.matched] == ["plain", "checkpoint"]
    for m in section.matched:
        if m.staged is None:
            assert m.verdict == NONE_FITS and all(p.peak_bytes is None or p.peak_bytes > m.peak_bytes
                                                  for p in points if p.mode == "staged")
        else:
            assert m.staged_peak_bytes <= m.peak_bytes
            assert m.verdict == (DTR_WINS if m.staged_step_s < m.step_s else DTR_LOSES)
    assert "models compared" in log.getvalue()
    png, svg = plots.files(tmp_path / "r" / "figures", "checkpointing")
    assert repro.figures["checkpointing"]["png"] == png and png.stat().st_size > 0 and svg.is_file()
    html, md = (tmp_path / "r" / "report.html").read_text(), (tmp_path / "r" / "summary.md").read_text()
    assert 'id="checkpointing"' in html and html.count("<tr><td>unet</td>") == len(section.matched) + len(points)
    assert md.count("| unet | ") == len(section.matched) and "figures/checkpointing.png" in md
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert "checkpointing: staged DTR beside PyTorch's own (with --checkpointing)" in record["timings_s"]
    assert stored(tmp_path / "r", "checkpointing", {**checkpointing.decided_by(), "code": code_digest()})
