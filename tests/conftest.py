"""Shared fixtures: where ../shared is, and the lowered public traces (read once per session)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DTRLAB_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces" / "dtr-iclr21"
REFERENCE = SHARED / "reference"

needs_shared = pytest.mark.skipif(
    not TRACES.is_dir(),
    reason=f"the public traces are not at {TRACES} (set DTRLAB_SHARED to the shared folder)",
)


@functools.lru_cache(maxsize=None)
def public_program(name: str):
    """The lowered public trace `name` (e.g. "resnet32"), without touching the user's cache."""
    from dtrlab.trace import load

    (program,) = load(TRACES, [name], cache=False)
    return program


@functools.lru_cache(maxsize=None)
def parity_rows() -> tuple[dict, ...]:
    with open(REFERENCE / "parity.jsonl") as f:
        return tuple(json.loads(line) for line in f if line.strip())


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Tests never write into the user's cache folder, nor into their data folder (fetched traces)."""
    monkeypatch.setenv("DTRLAB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "dtrlab-cache"))
    monkeypatch.setenv("DTRLAB_DATA_DIR", str(tmp_path_factory.mktemp("dtrlab-data")))
