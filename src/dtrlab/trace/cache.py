"""The lowered-program cache: a Program's arrays in an .npz and a small JSON beside it, keyed by content.

Owns the cache's location, key and file format; a missing or corrupt entry is rebuilt, never an error.
A program's baseline (its unconstrained peak and compute) is computed by its caller (dtrlab.sim) and
handed back through `remember_baseline`, so that this package needs nothing of the simulator.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tempfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..semantics import SEMANTICS_VERSION
from .lower import Program, lower
from .read import TraceSource, parse_bytes

# Bump whenever the Program's fields or this file format change; a change of what lowering computes
# bumps dtrlab.semantics.SEMANTICS_VERSION instead. Both are in the key: old entries are then never
# read again, so nobody has to clear their cache.
# 2: the .json holds the .npz's sha256.
FORMAT_VERSION = 2

ARRAY_FIELDS = tuple(f.name for f in dataclasses.fields(Program) if f.type in ("np.ndarray", np.ndarray))

# What reading a damaged entry can raise (np.load and zipfile on damaged data, json on bad text,
# our own checks below); any of them means "rebuild it".
_DAMAGE = (OSError, EOFError, ValueError, KeyError, TypeError, IndexError, RecursionError,
           NotImplementedError,  # zipfile, on a damaged compression-method field
           zipfile.BadZipFile, zlib.error)


def cache_dir() -> Path:
    """$DTRLAB_CACHE_DIR, else $XDG_CACHE_HOME/dtrlab, else ~/.cache/dtrlab."""
    explicit = os.environ.get("DTRLAB_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says to ignore a relative XDG_CACHE_HOME.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "dtrlab"


def cache_key(sha256: str, strict: bool, has_start: bool | None) -> str:
    """What decides the lowered program: the bytes, the format and semantics versions, strictness
    and the START rule.

    has_start is part of the key because the same bytes lower differently when a manifest
    says has_start false (no skip) and when the START skip applies.
    """
    start = {True: "start", False: "nostart", None: "autostart"}[has_start]
    return f"{sha256}-v{FORMAT_VERSION}-s{SEMANTICS_VERSION}-{'strict' if strict else 'lenient'}-{start}"


def _paths(directory: Path, key: str) -> tuple[Path, Path]:
    folder = directory / "programs"
    return folder / f"{key}.npz", folder / f"{key}.json"


def _atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _meta_json(program: Program, key: str, npz_sha256: str) -> dict:
    base = program.meta.get(STORED_BASELINE)
    return {
        "format_version": FORMAT_VERSION,
        "key": key,
        "npz_sha256": npz_sha256,
        "name": program.name,
        "sha256": program.sha256,
        "op_names": list(program.op_names),
        "tensor_names": list(program.tensor_names),
        "instructions": program.meta.get("instructions"),
        "skipped_lines": program.meta.get("skipped_lines"),
        "annotations": program.meta.get("annotations"),
        "baseline": None if base is None else {"peak_bytes": base[0], "compute_ns": base[1]},
    }


def _checksum(meta: dict) -> str:
    # A flipped digit in a name or in the baseline would still parse, so the JSON carries a
    # digest of its content; it holds the .npz's digest too, since an edited array (a cost, a
    # size) is a valid .npz whose CRCs an editor rewrites.
    canonical = json.dumps(meta, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _write_json(program: Program, key: str, directory: Path, npz_sha256: str) -> None:
    meta = _meta_json(program, key, npz_sha256)
    meta["checksum"] = _checksum(meta)
    text = json.dumps(meta, separators=(",", ":"))
    _atomic_write(_paths(directory, key)[1], lambda f: f.write(text.encode("utf-8")))


def write_entry(program: Program, key: str, directory: Path | None = None) -> bool:
    """Store `program` under `key`; False when the cache folder cannot be written (nothing is lost)."""
    directory = cache_dir() if directory is None else directory
    npz, _ = _paths(directory, key)
    buffer = io.BytesIO()
    np.savez(buffer, **program.arrays())
    data = buffer.getvalue()
    program.meta["_npz_sha256"] = npz_sha256 = hashlib.sha256(data).hexdigest()
    try:
        # Arrays first, JSON second: an entry counts only once its JSON exists.
        _atomic_write(npz, lambda f: f.write(data))
        _write_json(program, key, directory, npz_sha256)
    except OSError:
        return False
    return True


# program.meta keys this module owns: the stored baseline as (peak_bytes, compute_ns), and where the
# program's entry is, so that a baseline computed later can be added to it.
STORED_BASELINE = "stored_baseline"
_ENTRY = "_cache_entry"


def _baseline_from(value) -> tuple[int, int] | None:
    if value is None:
        return None
    peak, compute = value["peak_bytes"], value["compute_ns"]
    if not (type(peak) is int and type(compute) is int and peak >= 0 and compute >= 0):
        raise TypeError("baseline fields must be non-negative integers")
    return peak, compute


def remember_baseline(program: Program, peak_bytes: int, compute_ns: int) -> None:
    """Keep the program's baseline with it and, when it came through the cache, in its entry."""
    program.meta[STORED_BASELINE] = (int(peak_bytes), int(compute_ns))
    entry = program.meta.get(_ENTRY)
    if entry is not None:
        directory, key = entry
        try:
            _write_json(program, key, directory, program.meta["_npz_sha256"])
        except OSError:
            pass  # a read-only cache costs a recomputation next time, nothing more


def read_entry(key: str, sha256: str, name: str, directory: Path | None = None) -> Program | None:
    """The cached program under `key`, or None when there is none or it is damaged."""
    directory = cache_dir() if directory is None else directory
    npz, js = _paths(directory, key)
    try:
        meta = json.loads(js.read_text(encoding="utf-8"))
        if meta.pop("checksum") != _checksum(meta):
            return None
        if meta["format_version"] != FORMAT_VERSION or meta["key"] != key or meta["sha256"] != sha256:
            return None
        op_names = tuple(meta["op_names"])
        tensor_names = tuple(meta["tensor_names"])
        if not all(isinstance(n, str) for n in op_names + tensor_names):
            return None
        data = npz.read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["npz_sha256"]:
            return None
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            if set(z.files) != set(ARRAY_FIELDS):
                return None
            arrays = {k: z[k] for k in ARRAY_FIELDS}
        baseline = _baseline_from(meta["baseline"])
        instructions = meta["instructions"]
        if instructions is not None and not (isinstance(instructions, dict) and
                                             all(isinstance(v, int) for v in instructions.values())):
            return None
    except FileNotFoundError:
        return None
    except _DAMAGE:
        return None
    if not _consistent(arrays, len(op_names), len(tensor_names)):
        return None
    program = Program(name=name, sha256=sha256, op_names=op_names, tensor_names=tensor_names, **arrays)
    program.meta["instructions"] = instructions
    program.meta["skipped_lines"] = meta.get("skipped_lines")
    program.meta["annotations"] = meta.get("annotations")
    program.meta["_npz_sha256"] = meta["npz_sha256"]
    if baseline is not None:
        program.meta[STORED_BASELINE] = baseline
    return program


def _consistent(arrays: dict[str, np.ndarray], n_ops: int, n_tensors: int) -> bool:
    """The lengths the Program's invariants demand: a cheap guard against a damaged entry."""
    if any(a.ndim != 1 or a.dtype.kind not in "iub" for a in arrays.values()):
        return False
    per_op = ("op_cost_ns", "op_out_start", "op_n_out", "op_backward", "op_constant", "op_line")
    per_tensor = ("tensor_op", "tensor_size_bytes", "tensor_alias_arg", "tensor_storage")
    return (all(len(arrays[k]) == n_ops for k in per_op)
            and len(arrays["op_arg_ptr"]) == n_ops + 1
            and all(len(arrays[k]) == n_tensors for k in per_tensor)
            and len(arrays["storage_size_bytes"]) == len(arrays["storage_root"])
            and len(arrays["step_kind"]) == len(arrays["step_target"]))


def load_cached(source: TraceSource, strict: bool = False, directory: Path | None = None) -> Program:
    """The lowered program of `source`, from the cache when it holds it (with its baseline, if one
    was remembered). program.meta["cache"] says "hit" or "miss"; on a miss it is lowered and stored."""
    directory = cache_dir() if directory is None else directory
    data = source.read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    key = cache_key(sha256, strict, source.has_start)
    program = read_entry(key, sha256, source.name, directory)
    if program is not None:
        program.meta["cache"] = "hit"
    else:
        program = lower(parse_bytes(data, source, sha256), strict=strict)
        program.meta["cache"] = "miss"
        if not write_entry(program, key, directory):
            return program
    program.meta[_ENTRY] = (directory, key)
    return program


__all__ = ["FORMAT_VERSION", "STORED_BASELINE", "cache_dir", "cache_key", "load_cached", "read_entry",
           "remember_baseline", "write_entry"]
