"""Checks of a written report shared by the report tests: report.html in headless Chromium (every
figure decoded and drawn, no console error) and its links to files next to it."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from html import unescape
from pathlib import Path

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    assert width > 200 and height > 100, (path, width, height)


def check_in_chromium(repro, tmp_path: Path) -> str:
    """Open report.html headless: a screenshot, no page error, every figure loaded; the DOM."""
    page = (repro.out_dir / "report.html").resolve().as_uri()
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run",
              f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    shot = tmp_path / "report.png"
    proc = subprocess.run(common + [f"--screenshot={shot}", "--window-size=1280,4000", page],
                          capture_output=True, text=True, timeout=120)
    assert shot.is_file(), proc.stderr[-2000:]
    check_png(shot)
    # Messages the page itself logged (console errors, failed loads) name its file or say CONSOLE.
    page_errors = [line for line in proc.stderr.splitlines()
                   if "CONSOLE" in line or ("report.html" in line and "ERROR" in line)]
    assert not page_errors, page_errors
    dom = subprocess.run(common + ["--dump-dom", page], capture_output=True, text=True, timeout=120).stdout
    n = len(repro.figures)
    assert f'data-figures="loaded:{n}"' in dom, dom[-500:]
    return dom


def local_links(html: str) -> list[str]:
    """The report's links to files beside it (not to the web, not to its own anchors)."""
    links = [unescape(h) for h in re.findall(r'<a href="([^"]+)"', html)]
    return [h for h in links if not h.startswith(("http:", "https:", "#", "mailto:"))]


def _chromium(tmp_path: Path, name: str) -> list[str]:
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / f'profile-{name}'}"]


def check_layout(repro, tmp_path: Path, width: int) -> Path:
    """report.html at `width` px: nothing past the page's right edge or out of its table cell, no
    code (an option, a file name) broken over lines; the page report.html measures itself on load
    (data-overflow, data-broken-code). Returns the screenshot, for a person to look at."""
    page = (repro.out_dir / "report.html").resolve().as_uri()
    shot = tmp_path / f"report-{width}.png"
    size = f"--window-size={width},3000"
    proc = subprocess.run(_chromium(tmp_path, f"shot-{width}") + [f"--screenshot={shot}", size, page],
                          capture_output=True, text=True, timeout=120)
    assert shot.is_file(), proc.stderr[-2000:]
    check_png(shot)
    dom = subprocess.run(_chromium(tmp_path, f"dom-{width}") + [size, "--dump-dom", page],
                         capture_output=True, text=True, timeout=120).stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body is not None, dom[:500]
    attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', body.group(1)))
    assert attrs.get("data-figures", "").startswith("loaded:"), attrs
    assert unescape(attrs.get("data-overflow", "?")) == "none", (width, unescape(attrs.get("data-overflow", "?")))
    assert unescape(attrs.get("data-broken-code", "?")) == "none", (width, unescape(attrs.get("data-broken-code", "?")))
    return shot
