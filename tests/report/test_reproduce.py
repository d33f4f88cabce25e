"""dtrlab reproduce --quick end to end: on the public traces and on the traces shipped with dtrlab."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from dtrlab.report.claims import DEMONSTRATED, DIFFERS, HYPOTHESIS, NOT_APPLICABLE, REPRODUCED
from dtrlab.report.pipeline import STORE_NAME, _explain_inversions, reproduce
from dtrlab.sweep.store import Store
from dtrlab.trace import load

from conftest import TRACES, needs_shared, require_shared

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


@pytest.fixture(scope="module")
def public(tmp_path_factory):
    require_shared()
    out = tmp_path_factory.mktemp("public") / "report"
    return reproduce(str(TRACES), out, quick=True, workers=2, progress=False)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    out = tmp_path_factory.mktemp("shipped") / "report"
    return reproduce(None, out, quick=True, workers=2, progress=False)


def _claims(repro) -> dict:
    return {c.key: c for c in repro.claims}


@needs_shared
def test_public_quick_claims(public):
    claims = _claims(public)
    assert sorted(claims) == ["a1", "a2", "a3", "b1", "b2", "c"]
    # The quick plan leaves the (slow) public LSTM out: its claims say so.
    for key in ("a1", "a2", "a3", "c"):
        assert claims[key].verdict.startswith(NOT_APPLICABLE)
    # ResNet-32's inversion and its explanation are measured, not copied.
    b1, b2 = claims["b1"], claims["b2"]
    assert b1.verdict == REPRODUCED and b1.kind == DEMONSTRATED
    assert b1.evidence["last_feasible_ratio"] == 0.101 and b1.evidence["next_feasible_ratio"] == 0.107
    assert b1.evidence["infeasible_ratios"] == [0.102, 0.103, 0.104, 0.105, 0.106]
    assert b2.verdict == REPRODUCED
    assert b2.evidence["explained"] == b2.evidence["frontier_exceeds_budget"] == 5
    assert claims["c"].kind == HYPOTHESIS


@needs_shared
def test_public_quick_files_and_rerun(public, tmp_path):
    out = public.out_dir
    for name in ("report.html", "summary.md", "results.parquet", STORE_NAME):
        assert (out / name).is_file(), name
    frame = pd.read_parquet(out / "results.parquet")
    with Store(out / STORE_NAME, read_only=True) as store:
        assert len(store) == len(frame) >= len(public.frame)
    assert set(frame["policy"]) >= {"dtr", "msps", "lru"} and set(frame["trace"]) == {"resnet32", "unet"}
    summary = (out / "summary.md").read_text()
    assert "| (b1) ResNet-32" in summary and "**reproduced**" in summary
    # A second run finds every run in the store and simulates nothing new.
    before = len(frame)
    again = reproduce(str(TRACES), out, quick=True, workers=2, progress=False)
    assert len(pd.read_parquet(out / "results.parquet")) == before
    assert [c.verdict for c in again.claims] == [c.verdict for c in public.claims]


@needs_shared
def test_oom_replays_are_bounded_by_score_evaluations(public, tmp_path):
    # A count from the store, not a time: what a report explains does not depend on the machine.
    frame = public.frame
    row = frame[(frame.trace == "resnet32") & (frame.policy == "dtr") & (frame.ratio == 0.104)].iloc[0]
    evals = int(row.score_evals)
    programs = {p.name: p for p in load(str(TRACES), ["resnet32", "unet"])}
    cases, skipped = _explain_inversions(tmp_path / "a", public.curves, programs, frame,
                                         replace(public.plan, max_explain_score_evals=evals))
    assert 0.104 in {c.ratio for c in cases if c.trace == "resnet32"}
    cases, skipped = _explain_inversions(tmp_path / "b", public.curves, programs, frame,
                                         replace(public.plan, max_explain_score_evals=evals - 1))
    assert 0.104 not in {c.ratio for c in cases if c.trace == "resnet32"}
    assert (f"resnet32 dtr at ratio 0.104: {evals:,} score evaluations, past the plan's {evals - 1:,} "
            "for a replay on the Python engine") in skipped


def test_shipped_quick(shipped):
    names = {t["name"] for t in shipped.traces}
    assert {"resnet32", "unet", "lstm"} <= names
    claims = _claims(shipped)
    # Captured traces are not the study's: every claim says so, whatever dtrlab measures on them.
    for c in claims.values():
        assert c.verdict.startswith(NOT_APPLICABLE), (c.key, c.verdict)
        assert c.verdict != DIFFERS
    assert "another trace than the study's" in claims["b1"].verdict
    assert (shipped.out_dir / "report.html").is_file()
    assert any(name.startswith("overhead-") for name in shipped.figures)


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    assert width > 200 and height > 100, (path, width, height)


def _check_svg(path: Path) -> None:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), path


@needs_shared
def test_figures_valid(public):
    figs = public.figures
    assert {"overhead-resnet32", "feasibility-fine", "memory-near-oom", "ablation-heatmap"} <= set(figs)
    for fig in figs.values():
        _check_png(fig["png"])
        _check_svg(fig["svg"])
    on_disk = sorted(p.name for p in (public.out_dir / "figures").iterdir())
    assert on_disk == sorted(f"{n}.{e}" for n in figs for e in ("png", "svg"))


def test_cli_reproduce_shipped(shipped, tmp_path):
    # The shipped fixture's folder: every run is in its store, so the command simulates nothing new.
    out = shipped.out_dir
    proc = subprocess.run([sys.executable, "-m", "dtrlab.cli", "reproduce", "--quick", "--out", str(out),
                           "--workers", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "claims of the study" in proc.stdout
    assert str(out / "report.html") in proc.stdout.replace("\n", "")
    bad = subprocess.run([sys.executable, "-m", "dtrlab.cli", "reproduce", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("dtrlab: ") and "Traceback" not in bad.stderr


@needs_shared
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
def test_report_in_headless_chromium(public, tmp_path):
    page = (public.out_dir / "report.html").resolve().as_uri()
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run",
              f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    shot = tmp_path / "report.png"
    proc = subprocess.run(common + [f"--screenshot={shot}", "--window-size=1280,4000", page],
                          capture_output=True, text=True, timeout=120)
    assert shot.is_file(), proc.stderr[-2000:]
    _check_png(shot)
    # Messages the page itself logged (console errors, failed loads) name its file or say CONSOLE.
    page_errors = [line for line in proc.stderr.splitlines()
                   if "CONSOLE" in line or ("report.html" in line and "ERROR" in line)]
    assert not page_errors, page_errors
    dom = subprocess.run(common + ["--dump-dom", page], capture_output=True, text=True, timeout=120).stdout
    n = len(public.figures)
    assert f'data-figures="loaded:{n}"' in dom, dom[-500:]
