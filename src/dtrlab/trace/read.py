"""Reading DTR execution traces: sources (file, folder, logs.zip) and validated instructions.

Owns the JSON-lines format; every malformed line becomes a TraceError(path, line, reason).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Union

from ..errors import TraceError, UsageError

# --- instructions -------------------------------------------------------------------------
# One NamedTuple a kind; `line` is the 1-based line number in the source file.


class Constant(NamedTuple):
    line: int
    name: str


class Memory(NamedTuple):
    line: int
    name: str
    size_bytes: int


class Alias(NamedTuple):
    line: int
    name: str
    alias: int


class Call(NamedTuple):
    line: int
    name: str
    args: tuple[str, ...]
    results: tuple[str, ...]
    time_ns: int


class Mutate(NamedTuple):
    line: int
    name: str
    args: tuple[str, ...]
    mutate: tuple[int, ...]
    time_ns: int


class Copy(NamedTuple):
    line: int
    dst: str
    src: str


class CopyFrom(NamedTuple):
    line: int
    dst: str
    src: str


class Release(NamedTuple):
    line: int
    name: str


class Annotate(NamedTuple):
    line: int
    annotation: str


Instruction = Union[Constant, Memory, Alias, Call, Mutate, Copy, CopyFrom, Release, Annotate]

# Each instruction type's INSTRUCTION value in the trace format.
KIND_NAMES: dict[type, str] = {
    Constant: "CONSTANT", Memory: "MEMORY", Alias: "ALIAS", Call: "CALL", Mutate: "MUTATE",
    Copy: "COPY", CopyFrom: "COPY_FROM", Release: "RELEASE", Annotate: "ANNOTATE",
}

START = "START"
BACKWARD = "BACKWARD"

# Sizes and times live in int64 arrays; a larger value is a corrupt trace, not a big model.
INT64_MAX = 2**63 - 1


def _field(obj: dict, key: str, path: str, line: int):
    try:
        return obj[key]
    except KeyError:
        raise TraceError(path, line, f"{obj['INSTRUCTION']} is missing field {key}") from None


def _name(obj: dict, key: str, path: str, line: int) -> str:
    value = _field(obj, key, path, line)
    if not isinstance(value, str) or not value:
        raise TraceError(path, line, f"field {key} must be a non-empty string, got {value!r}")
    return value


def _int(obj: dict, key: str, path: str, line: int, minimum: int) -> int:
    """An integer field; the public traces write integers as decimal strings."""
    value = _field(obj, key, path, line)
    if isinstance(value, bool):
        value = None
    elif isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        # Python refuses to convert strings of more than 4300 digits; 2**63 has 19.
        value = int(value) if len(value.strip().lstrip("-").lstrip("0")) <= 20 else INT64_MAX + 1
    if not isinstance(value, int):
        raise TraceError(path, line, f"field {key} must be an integer, got {obj[key]!r}")
    if value > INT64_MAX:
        raise TraceError(path, line, f"field {key} is too large for a 64-bit integer")
    if value < minimum:
        what = "negative" if minimum == 0 else f"below {minimum}"
        raise TraceError(path, line, f"field {key} is {what}: {value}")
    return value


def _names(obj: dict, key: str, path: str, line: int) -> tuple[str, ...]:
    value = _field(obj, key, path, line)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TraceError(path, line, f"field {key} must be a list of names, got {value!r}")
    return tuple(value)


def parse_line(text: str, path: str, line: int) -> Instruction:
    """One instruction from one line of a trace."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError is a ValueError; a bare ValueError is a number literal too long to convert.
        if isinstance(exc, json.JSONDecodeError):
            reason = exc.msg
        elif isinstance(exc, RecursionError):
            reason = "nested too deeply"
        else:
            reason = "a number with too many digits"
        raise TraceError(path, line, f"malformed JSON: {reason}") from None
    if not isinstance(obj, dict):
        raise TraceError(path, line, "an instruction must be a JSON object")
    kind = obj.get("INSTRUCTION")
    if kind == "CALL":
        results = _names(obj, "RESULT", path, line)
        if not results:
            raise TraceError(path, line, "CALL has no results")
        return Call(line, _name(obj, "NAME", path, line), _names(obj, "ARGS", path, line),
                    results, _int(obj, "TIME", path, line, 0))
    if kind == "MEMORY":
        return Memory(line, _name(obj, "NAME", path, line), _int(obj, "MEMORY", path, line, 0))
    if kind == "ALIAS":
        return Alias(line, _name(obj, "NAME", path, line), _int(obj, "ALIAS", path, line, -1))
    if kind == "CONSTANT":
        return Constant(line, _name(obj, "NAME", path, line))
    if kind == "COPY":
        return Copy(line, _name(obj, "DST", path, line), _name(obj, "SRC", path, line))
    if kind == "RELEASE":
        return Release(line, _name(obj, "NAME", path, line))
    if kind == "MUTATE":
        args = _names(obj, "ARGS", path, line)
        mutate = _field(obj, "MUTATE", path, line)
        if (not isinstance(mutate, list) or not mutate
                or not all(isinstance(m, int) and not isinstance(m, bool) for m in mutate)):
            raise TraceError(path, line, f"field MUTATE must be a non-empty list of argument indices, got {mutate!r}")
        for m in mutate:
            if not 0 <= m < len(args):
                raise TraceError(path, line, f"MUTATE index {m} is out of range for {len(args)} arguments")
        return Mutate(line, _name(obj, "NAME", path, line), args, tuple(mutate),
                      _int(obj, "TIME", path, line, 0))
    if kind == "COPY_FROM":
        return CopyFrom(line, _name(obj, "DST", path, line), _name(obj, "SRC", path, line))
    if kind == "ANNOTATE":
        return Annotate(line, _name(obj, "ANNOTATION", path, line))
    if kind is None:
        raise TraceError(path, line, "missing field INSTRUCTION")
    raise TraceError(path, line, f"unknown instruction {kind!r}")


# --- sources ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceSource:
    """One trace inside a source: where its bytes are and how to read them."""

    name: str  # short name: the log file name's first word, e.g. "resnet32"
    title: str  # the manifest's name, or the file name
    path: str  # for messages: a file path, or "logs.zip:logs/x.log"
    has_start: bool | None  # True: skip to START; None: skip to START when there is one
    load: Callable[[], bytes]

    def read_bytes(self) -> bytes:
        """The trace's bytes, decompressed when they are gzip data (whatever the file is called)."""
        try:
            data = self.load()
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise TraceError(self.path, 0, f"corrupt zip member: {exc}") from None
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as exc:
                raise TraceError(self.path, 0, f"corrupt gzip data: {exc}") from None
        return data


def _short_name(file_name: str) -> str:
    base = Path(file_name).name
    for suffix in (".gz", ".log", ".jsonl", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base.split("-")[0] or base


def _file_loader(path: Path) -> Callable[[], bytes]:
    return path.read_bytes


def _zip_loader(zip_path: Path, member: str) -> Callable[[], bytes]:
    def load() -> bytes:
        with zipfile.ZipFile(zip_path) as zf:
            return zf.read(member)

    return load


def _from_manifest(manifest: dict, where: str, exists: Callable[[str], bool],
                   loader: Callable[[str], Callable[[], bytes]], display: Callable[[str], str]) -> list[TraceSource]:
    models = manifest.get("models") if isinstance(manifest, dict) else None
    if not isinstance(models, list):
        raise TraceError(where, 1, "manifest.json must hold an object with a list 'models'")
    out = []
    for i, model in enumerate(models):
        if not isinstance(model, dict) or not isinstance(model.get("log"), str):
            raise TraceError(where, 1, f"manifest model #{i} has no 'log' file name")
        log = model["log"]
        if not exists(log):
            raise TraceError(where, 1, f"manifest names {log!r}, which is not there")
        out.append(TraceSource(_short_name(log), str(model.get("name", log)), display(log),
                               bool(model.get("has_start", False)), loader(log)))
    return out


def open_source(source: str | Path) -> list[TraceSource]:
    """Every trace in a source: a .log/.jsonl(.gz) file, a folder with manifest.json, or a logs.zip."""
    path = Path(source)
    if not path.exists():
        raise UsageError(f"{source}: no such file or folder")
    if path.is_dir():
        manifest = path / "manifest.json"
        if manifest.exists():
            try:
                data = json.loads(manifest.read_text())
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                raise TraceError(str(manifest), getattr(exc, "lineno", 1), f"malformed manifest: {exc}") from None
            return _from_manifest(data, str(manifest), lambda n: (path / n).is_file(),
                                  lambda n: _file_loader(path / n), lambda n: str(path / n))
        files = sorted(p for p in path.iterdir() if p.is_file() and
                       re.search(r"\.(log|jsonl)(\.gz)?$", p.name))
        if not files:
            raise UsageError(f"{source}: a folder with neither manifest.json nor trace files")
        return [TraceSource(_short_name(p.name), p.name, str(p), None, _file_loader(p)) for p in files]
    if zipfile.is_zipfile(path):
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise TraceError(str(source), 0, f"corrupt zip file: {exc}") from None
        with zf:
            names = set(zf.namelist())
            manifests = sorted(n for n in names if n.endswith("manifest.json"))
            if not manifests:
                raise UsageError(f"{source}: a zip file without manifest.json (expected logs/manifest.json)")
            member = "logs/manifest.json" if "logs/manifest.json" in names else manifests[0]
            prefix = member[: -len("manifest.json")]
            try:
                data = json.loads(zf.read(member))
            except (ValueError, zipfile.BadZipFile, zlib.error) as exc:  # ValueError: JSON and UTF-8
                raise TraceError(f"{source}:{member}", getattr(exc, "lineno", 1), f"malformed manifest: {exc}") from None
        return _from_manifest(data, f"{source}:{member}", lambda n: prefix + n in names,
                              lambda n: _zip_loader(path, prefix + n), lambda n: f"{source}:{prefix}{n}")
    return [TraceSource(_short_name(path.name), path.name, str(path), None, _file_loader(path))]


def select(sources: list[TraceSource], prefixes: list[str] | None, source_label: str = "") -> list[TraceSource]:
    """The traces whose short name or title starts with one of `prefixes` (case-insensitive)."""
    if not prefixes:
        return sources
    chosen = []
    for prefix in prefixes:
        p = prefix.lower()
        hits = [s for s in sources if s.name.lower().startswith(p) or s.title.lower().startswith(p)]
        if not hits:
            names = ", ".join(s.name for s in sources)
            raise UsageError(f"{source_label or 'source'}: no trace matches {prefix!r} (traces: {names})")
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


@dataclass(frozen=True)
class TraceText:
    """The instructions of one trace after the START skip, with the source's sha256."""

    source: TraceSource
    sha256: str
    instructions: tuple[Instruction, ...]
    skipped_lines: int  # lines before (and including) START


def read_trace(source: TraceSource) -> TraceText:
    """Parse and validate every line of one trace; skip to START as the source asks."""
    data = source.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    return parse_bytes(data, source, digest)


def parse_bytes(data: bytes, source: TraceSource, digest: str | None = None) -> TraceText:
    path = source.path
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceError(path, line, "not UTF-8 text") from None
    if text.startswith("\ufeff"):  # a byte-order mark some editors write; not part of line 1's JSON
        text = text[1:]
    instructions: list[Instruction] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if raw.strip():
            instructions.append(parse_line(raw, path, number))
    if not instructions:
        raise TraceError(path, 1, "empty trace: no instructions")
    skip = 0
    starts = [i for i, ins in enumerate(instructions) if isinstance(ins, Annotate) and ins.annotation == START]
    if source.has_start or (source.has_start is None and starts):
        if not starts:
            raise TraceError(path, instructions[-1].line,
                             "the manifest says has_start but the START annotation never comes")
        skip = starts[0] + 1
    body = tuple(instructions[skip:])
    if not body:
        raise TraceError(path, instructions[-1].line, "empty trace: nothing after the START annotation")
    return TraceText(source, digest or hashlib.sha256(data).hexdigest(), body,
                     instructions[skip - 1].line if skip else 0)
