"""The lowered-program cache: where it lives, when it hits, and that damage only costs a rebuild."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dtrlab.sim.simulate as simulate_module
import dtrlab.trace.cache as cache_module
from conftest import cli_invoke
from dtrlab.semantics import SEMANTICS_VERSION
from dtrlab.sim.simulate import Baseline, baseline, compute_baseline, simulate
from dtrlab.trace import load, load_one
from dtrlab.trace.cache import cache_dir, cache_key, load_cached
from dtrlab.trace.read import open_source
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import write_trace
from trace_helpers import assert_same_program

TINY = Path(__file__).resolve().parents[2] / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty cache folder for one test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("DTRLAB_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def lowerings(monkeypatch):
    """Counts the lowerings done behind the cache."""
    calls = []
    real = cache_module.lower

    def counting(text, strict=False):
        calls.append(text.source.path)
        return real(text, strict=strict)

    monkeypatch.setattr(cache_module, "lower", counting)
    return calls


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "programs").iterdir()) if (folder / "programs").exists() else []


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("DTRLAB_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DTRLAB_CACHE_DIR")
    assert cache_dir() == tmp_path / "xdg" / "dtrlab"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert cache_dir() == tmp_path / "home" / ".cache" / "dtrlab"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == tmp_path / "home" / ".cache" / "dtrlab"


def test_key_names_version_strictness_and_start_rule():
    keys = {cache_key("ab", strict, start) for strict in (False, True) for start in (None, True, False)}
    assert len(keys) == 6
    assert cache_key("ab", False, None).startswith(f"ab-v{cache_module.FORMAT_VERSION}-")


def test_second_load_comes_from_the_cache(cache, lowerings):
    first = load_one(TINY)
    assert first.meta["cache"] == "miss" and len(lowerings) == 1
    assert entries(cache) == [f"{first.sha256}-v{cache_module.FORMAT_VERSION}-s{SEMANTICS_VERSION}-lenient-autostart.{ext}"
                              for ext in ("json", "npz")]
    second = load_one(TINY)
    assert second.meta["cache"] == "hit" and len(lowerings) == 1
    assert_same_program(second, first)
    assert_same_program(second, load_one(TINY, cache=False))
    assert second.meta["instructions"] == first.meta["instructions"]
    assert second.meta["annotations"] == first.meta["annotations"]
    # strictness is part of the key: a strict load lowers again, once
    load_one(TINY, strict=True)
    load_one(TINY, strict=True)
    assert len(lowerings) == 2


def test_the_baseline_is_stored_and_found_without_recomputing(cache, monkeypatch):
    expected = compute_baseline(load_one(TINY, cache=False))
    assert baseline(load_one(TINY)) == expected  # a miss lowers; the first baseline() stores it

    def refuse(program):
        raise AssertionError("the baseline should have come from the cache")

    monkeypatch.setattr(simulate_module, "compute_baseline", refuse)
    program = load_one(TINY)
    assert program.meta["cache"] == "hit"
    assert program.meta[cache_module.STORED_BASELINE] == (expected.peak_bytes, expected.compute_ns)
    assert baseline(program) == expected
    stored = json.loads(next((cache / "programs").glob("*.json")).read_text())
    assert stored["baseline"] == {"peak_bytes": expected.peak_bytes, "compute_ns": expected.compute_ns}


def test_an_entry_without_baseline_gets_one(cache):
    program = load_one(TINY)
    baseline(program)
    js = next((cache / "programs").glob("*.json"))
    meta = json.loads(js.read_text())
    meta["baseline"] = None
    meta["checksum"] = cache_module._checksum({k: v for k, v in meta.items() if k != "checksum"})
    js.write_text(json.dumps(meta))
    again = load_one(TINY)
    assert again.meta["cache"] == "hit" and cache_module.STORED_BASELINE not in again.meta
    assert baseline(again) == baseline(program)
    assert json.loads(js.read_text())["baseline"] is not None


def test_cached_programs_simulate_identically(cache):
    fresh = load_one(TINY, cache=False)
    load_one(TINY)
    cached = load_one(TINY)
    assert cached.meta["cache"] == "hit"
    for budget in (None, 4_000_000, 3_000_000):
        assert simulate(cached, budget) == simulate(fresh, budget)


def test_no_cache_writes_nothing(cache, lowerings):
    load(TINY, cache=False)
    assert not cache.exists()


def test_same_bytes_under_another_name(cache, tmp_path, lowerings):
    load_one(TINY)
    other = tmp_path / "renamed-copy.jsonl"
    shutil.copy(TINY, other)
    program = load_one(other)
    assert program.meta["cache"] == "hit" and len(lowerings) == 1
    assert program.name == "renamed"  # the name is the source's, not the cached one's


def test_format_version_change_misses(cache, monkeypatch, lowerings):
    load_one(TINY)
    monkeypatch.setattr(cache_module, "FORMAT_VERSION", cache_module.FORMAT_VERSION + 1)
    assert load_one(TINY).meta["cache"] == "miss"
    assert len(lowerings) == 2


def test_changed_trace_misses(cache, tmp_path, lowerings):
    path = tmp_path / "t.jsonl"
    write_trace(synthetic_trace(1, n_ops=5), path)
    a = load_one(path)
    write_trace(synthetic_trace(2, n_ops=5), path)
    b = load_one(path)
    assert b.meta["cache"] == "miss" and a.sha256 != b.sha256


DAMAGE = {
    "truncated npz": lambda npz, js: npz.write_bytes(npz.read_bytes()[:100]),
    "empty npz": lambda npz, js: npz.write_bytes(b""),
    "missing npz": lambda npz, js: npz.unlink(),
    "garbage json": lambda npz, js: js.write_text("{nope"),
    "missing json": lambda npz, js: js.unlink(),
    "json of a list": lambda npz, js: js.write_text("[]"),
    "other sha": lambda npz, js: js.write_text(js.read_text().replace('"sha256":"', '"sha256":"0')),
    "names cut short": lambda npz, js: js.write_text(json.dumps({**json.loads(js.read_text()), "op_names": ["x"]})),
    "bad baseline": lambda npz, js: js.write_text(json.dumps({**json.loads(js.read_text()),
                                                                "baseline": {"peak_bytes": "big"}})),
    "bad instructions": lambda npz, js: js.write_text(json.dumps({**json.loads(js.read_text()),
                                                                    "instructions": [1]})),
    "one name changed": lambda npz, js: js.write_text(js.read_text().replace('"constant"', '"bonstant"', 1)),
    "a cost edited": lambda npz, js: edit_npz(npz, "op_cost_ns", lambda a: a + (a.max() + 7) * (a == a.max())),
    "a size edited": lambda npz, js: edit_npz(npz, "storage_size_bytes", lambda a: a * 2),
}


def edit_npz(npz: Path, key: str, change) -> None:
    """Rewrite the .npz as a valid archive with one array changed: its CRCs are right, its digest is not."""
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = change(arrays[key]).astype(arrays[key].dtype)
    with open(npz, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_entry_is_rebuilt(cache, lowerings, damage):
    first = load_one(TINY)
    npz = next((cache / "programs").glob("*.npz"))
    DAMAGE[damage](npz, npz.with_suffix(".json"))
    rebuilt = load_one(TINY)
    assert rebuilt.meta["cache"] == "miss" and len(lowerings) == 2
    assert_same_program(rebuilt, first)
    again = load_one(TINY)  # rewritten whole: the next load hits
    assert again.meta["cache"] == "hit" and len(lowerings) == 2


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzz_damaged_cache_files(tmp_path_factory, data):
    """Whatever happens to the bytes of an entry, a load gives the right program."""
    folder = tmp_path_factory.mktemp("cache")  # a fresh cache each example: no state carried over
    (source,) = open_source(TINY)
    first = load_cached(source, directory=folder)
    files = sorted((folder / "programs").glob("*.*"))
    target = data.draw(st.sampled_from(files), label="file")
    blob = bytearray(target.read_bytes())
    at = data.draw(st.integers(0, len(blob) - 1), label="at")
    if data.draw(st.booleans(), label="truncate"):
        del blob[at:]
    else:
        blob[at] ^= data.draw(st.integers(1, 255), label="xor")
    target.write_bytes(bytes(blob))
    again = load_cached(source, directory=folder)
    assert_same_program(again, first)
    assert baseline(again) == baseline(first)
    assert again.meta["instructions"] == first.meta["instructions"]


def test_an_unwritable_cache_folder_only_costs_speed(tmp_path, monkeypatch, lowerings):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("DTRLAB_CACHE_DIR", str(blocker))
    program = load_one(TINY)
    assert program.meta["cache"] == "miss" and isinstance(baseline(program), Baseline)
    assert load_one(TINY).meta["cache"] == "miss"


def test_no_temporary_files_are_left(cache):
    load_one(TINY)
    load_one(TINY, strict=True)
    assert all(not name.endswith(".tmp") for name in entries(cache))
    assert len(entries(cache)) == 4


def test_simulate_from_an_edited_npz_equals_no_cache(cache):
    """The issue's case: a cost edited in the .npz was trusted, and simulate differed from --no-cache."""
    def run(*extra):
        return json.loads(cli_invoke("simulate", TINY, "-r", "0.5", "--json", *extra, check=True).stdout)

    fresh = run("--no-cache")
    assert run()["clock_ns"] == fresh["clock_ns"]  # fills the cache
    npz = next((cache / "programs").glob("*.npz"))
    edit_npz(npz, "op_cost_ns", lambda a: a * 3)
    assert run() == fresh
    assert load_one(TINY).meta["cache"] == "hit"  # the entry was rewritten from the trace


def test_a_semantics_bump_never_reads_an_old_entry(cache, lowerings, monkeypatch):
    """Entries are keyed by the semantics version: after a bump the old entry is never read."""
    assert load_one(TINY).meta["cache"] == "miss"
    assert load_one(TINY).meta["cache"] == "hit"
    monkeypatch.setattr(cache_module, "SEMANTICS_VERSION", SEMANTICS_VERSION + 1)
    assert load_one(TINY).meta["cache"] == "miss" and len(lowerings) == 2
    assert len(entries(cache)) == 4  # the old entry stays: a downgrade reads it again


def test_reading_through_the_cache_needs_nothing_of_the_simulator(tmp_path):
    """The trace package stands alone: the baseline comes from its caller."""
    code = ("import sys; from dtrlab.trace import load_one; "
            f"p = load_one({str(TINY)!r}); assert p.meta['cache'] in ('hit', 'miss'); "
            "print(sorted(m for m in sys.modules if m.startswith('dtrlab.sim')))")
    # A fresh interpreter: what an import pulls in shows only in a process that imported nothing before.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, DTRLAB_CACHE_DIR=str(tmp_path)))
    assert out.stdout.strip() == "[]"
