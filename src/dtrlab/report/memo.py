"""A memo of analysis results in the report folder, so a re-run does not simulate them again.

Owns the key (what decides a result, dtrlab's version included) and the pickle files under analyses/.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any, Callable

from .. import __version__


def memo(folder: Path, kind: str, key: dict, compute: Callable[[], Any]) -> Any:
    """compute() once per (kind, key); later calls read the stored value. The files are ours:
    written by this function, atomically, in the report folder."""
    canonical = json.dumps({"kind": kind, "key": key, "dtrlab_version": __version__}, sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:24]
    path = Path(folder) / "analyses" / f"{kind}-{digest}.pickle"
    if path.exists():
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except Exception:  # a damaged entry costs a recomputation, never a failure
            pass
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        pickle.dump(value, f)
    os.replace(partial, path)
    return value
