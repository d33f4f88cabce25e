"""A memo of analysis results in the report folder, so a re-run does not simulate them again.

Owns the key (what decides a result, the semantics version included) and the pickle files under
analyses/; an entry is used only when it holds its own key and values of today's dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pickle
import zlib
from pathlib import Path
from typing import Any, Callable

from ..semantics import SEMANTICS_VERSION

_MISSING = object()
_PLAIN = pickle.dumps(None, pickle.HIGHEST_PROTOCOL)[:1]  # a pickle's first byte (PROTO); zlib's is 0x78


def _canonical(kind: str, key: dict) -> str:
    return json.dumps({"kind": kind, "key": key, "semantics": SEMANTICS_VERSION}, sort_keys=True)


def _of_today(value: Any) -> bool:
    """Whether every dataclass inside `value` has today's fields: pickle restores an instance of a
    class that has gained or lost a field without a word, and it fails only when that field is read."""
    stack = [value]
    while stack:
        v = stack.pop()
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            if {f.name for f in dataclasses.fields(v)} != set(vars(v)):
                return False
            stack.extend(vars(v).values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return True


def _read(path: Path, canonical: str) -> Any:
    """The stored value, or _MISSING when there is none, it is damaged, or it is not this key's."""
    try:
        data = path.read_bytes()
        # compressed since the facts of every run of the curves are kept; earlier entries are plain
        stored_key, value = pickle.loads(data if data[:1] == _PLAIN else zlib.decompress(data))
    except FileNotFoundError:
        return _MISSING
    except Exception:  # a damaged or foreign entry costs a recomputation, never a failure
        return _MISSING
    if stored_key != canonical or not _of_today(value):
        return _MISSING
    return value


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """The sha256 of dtrlab's own source files (Python and C): part of a key whose value the code
    decides beyond what SEMANTICS_VERSION covers (a measured live run, a figure's drawing)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".c", ".j2")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _path(folder: Path, kind: str, canonical: str) -> Path:
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:24]
    return Path(folder) / "analyses" / f"{kind}-{digest}.pickle"


def stored(folder: Path, kind: str, key: dict) -> bool:
    """Whether memo(folder, kind, key, ...) would read its value rather than compute it."""
    canonical = _canonical(kind, key)
    return _read(_path(folder, kind, canonical), canonical) is not _MISSING


def memo(folder: Path, kind: str, key: dict, compute: Callable[[], Any]) -> Any:
    """compute() once per (kind, key); later calls read the stored value. The files are ours:
    written by this function, atomically, in the report folder (from any process: each writes a
    file of its own, then renames it)."""
    canonical = _canonical(kind, key)
    path = _path(folder, kind, canonical)
    value = _read(path, canonical)
    if value is not _MISSING:
        return value
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(zlib.compress(pickle.dumps((canonical, value), pickle.HIGHEST_PROTOCOL), 1))
    os.replace(partial, path)
    return value
