"""Reading DTR execution traces: sources (file, folder, logs.zip) and validated instructions.

Owns the JSON-lines format; every malformed line becomes a TraceError(path, line, reason).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
import zipfile
import zlib
from collections import Counter
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


def _text(text: str, key: str, path: str, line: int) -> None:
    """A name must be text: JSON can escape a lone surrogate ("\\udc80"), which no output can print."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = ord(text[exc.start])
            raise TraceError(path, line, f"field {key} holds a lone surrogate \\u{code:04x}, not text") from None


def _name(obj: dict, key: str, path: str, line: int) -> str:
    value = _field(obj, key, path, line)
    if not isinstance(value, str) or not value:
        raise TraceError(path, line, f"field {key} must be a non-empty string, got {value!r}")
    _text(value, key, path, line)
    return value


_DECIMAL = re.compile(r"-?[0-9]+")


def _int(obj: dict, key: str, path: str, line: int, minimum: int) -> int:
    """An integer field; the public traces write integers as decimal strings."""
    value = _field(obj, key, path, line)
    if type(value) is int and minimum <= value <= INT64_MAX:  # the common case, checked below otherwise
        return value
    if isinstance(value, bool):
        value = None
    elif isinstance(value, str) and _DECIMAL.fullmatch(digits := value.strip()):
        # Python refuses to convert strings of more than 4300 digits; 2**63 has 19.
        value = int(digits) if len(digits.lstrip("-").lstrip("0")) <= 20 else INT64_MAX + 1
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
    _text("".join(value), key, path, line)
    return tuple(value)


_DECODE = json.JSONDecoder().raw_decode
_JSON_SPACE = " \t\r\n"  # what JSON counts as whitespace (str.strip would take more)


def parse_line(text: str, path: str, line: int) -> Instruction:
    """One instruction from one line of a trace."""
    try:
        text = text.strip(_JSON_SPACE)
        obj, end = _DECODE(text)  # json.loads, less its two whitespace scans
        if end != len(text):
            raise json.JSONDecodeError("Extra data", text, end)
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

    name: str  # unique in its source: the file name's first word ("resnet32"), longer if that clashes
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


def _words(file_name: str) -> list[str]:
    """A trace file's name without its folder and suffixes, split at "-"."""
    base = Path(file_name).name
    for suffix in (".gz", ".log", ".jsonl", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return [w for w in base.split("-") if w] or [base]


def unique_names(files: list[str]) -> list[str]:
    """One name a trace, unique in its source: the file name's first word, lengthened where it clashes.

    Names shared by several files take one more word of each file name, until they differ
    (`resnet32-8` and `resnet32-56`); names that clash with every word taken become the file's
    path in the source, and then take `#n` by order of appearance. Case is ignored, as in select.
    """
    words = [_words(f) for f in files]
    length = [1] * len(files)
    names = [w[0] for w in words]

    def clashing() -> list[int]:
        count = Counter(n.lower() for n in names)
        return [i for i, n in enumerate(names) if count[n.lower()] > 1]

    while grow := [i for i in clashing() if length[i] < len(words[i])]:
        for i in grow:
            length[i] += 1
            names[i] = "-".join(words[i][:length[i]])
    for i in clashing():
        names[i] = files[i]
    seen: Counter = Counter()
    for i in clashing():
        seen[names[i].lower()] += 1
        names[i] = f"{names[i]}#{seen[names[i].lower()]}"
    return names


def _named(sources: list[TraceSource], files: list[str]) -> list[TraceSource]:
    return [dataclasses.replace(s, name=n) for s, n in zip(sources, unique_names(files))]


def _file_loader(path: Path) -> Callable[[], bytes]:
    return path.read_bytes


def _zip_loader(zip_path: Path, member: str) -> Callable[[], bytes]:
    def load() -> bytes:
        with zipfile.ZipFile(zip_path) as zf:
            return zf.read(member)

    return load


def _log_candidates(log: str, folder_name: str) -> list[str] | None:
    """Where a manifest's `log` may be, relative to the manifest's folder; None if it points outside.

    Two layouts are read: paths relative to the manifest's folder (`x.log`), and simrd's, relative
    to the folder above it (`logs/x.log` in `logs/manifest.json`), which still lands inside.
    """
    parts = re.split(r"[/\\]", log)
    if (not log or log.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", log)
            or any(p == ".." for p in parts)):
        return None
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        return None
    candidates = ["/".join(parts)]
    if folder_name and len(parts) > 1 and parts[0] == folder_name:
        candidates.append("/".join(parts[1:]))
    return candidates


def _from_manifest(manifest: dict, where: str, folder_name: str, exists: Callable[[str], bool | None],
                   loader: Callable[[str], Callable[[], bytes]], display: Callable[[str], str]) -> list[TraceSource]:
    """The traces a manifest names. exists(member): True, False, or None for a member outside the source."""
    models = manifest.get("models") if isinstance(manifest, dict) else None
    if not isinstance(models, list):
        raise TraceError(where, 1, "manifest.json must hold an object with a list 'models'")
    out, files = [], []
    for i, model in enumerate(models):
        if not isinstance(model, dict) or not isinstance(model.get("log"), str):
            raise TraceError(where, 1, f"manifest model #{i} has no 'log' file name")
        log = model["log"]
        candidates = _log_candidates(log, folder_name) or []
        found = {c: exists(c) for c in candidates}
        if not candidates or None in found.values():
            raise TraceError(where, 1, f"manifest model #{i} names {log!r}, which is outside the source")
        member = next((c for c, there in found.items() if there), None)
        if member is None:
            raise TraceError(where, 1, f"manifest names {log!r}, which is not there")
        out.append(TraceSource(member, str(model.get("name", log)), display(member),
                               bool(model.get("has_start", False)), loader(member)))
        files.append(member)
    return _named(out, files)


def _inside(folder: Path) -> Callable[[str], bool | None]:
    """Whether a member is a file in `folder`: None when it resolves outside it (a symbolic link)."""
    root = folder.resolve()

    def exists(member: str) -> bool | None:
        target = (folder / member).resolve()
        if target != root and root not in target.parents:
            return None
        return target.is_file()

    return exists


def _open_folder(path: Path, source: str | Path) -> list[TraceSource]:
    manifest = path / "manifest.json"
    if not manifest.exists() and (path / "logs" / "manifest.json").is_file():
        # The folder `unzip logs.zip` leaves: its traces and manifest are in logs/.
        path, manifest = path / "logs", path / "logs" / "manifest.json"
    if manifest.exists():
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise TraceError(str(manifest), getattr(exc, "lineno", 1), f"malformed manifest: {exc}") from None
        return _from_manifest(data, str(manifest), path.name, _inside(path),
                              lambda n: _file_loader(path / n), lambda n: str(path / n))
    files = sorted(p for p in path.iterdir() if p.is_file() and
                   re.search(r"\.(log|jsonl)(\.gz)?$", p.name))
    if not files:
        raise UsageError(f"{source}: a folder with neither manifest.json nor trace files")
    return _named([TraceSource(p.name, p.name, str(p), None, _file_loader(p)) for p in files],
                  [p.name for p in files])


def _open_zip(path: Path, source: str | Path) -> list[TraceSource]:
    if not zipfile.is_zipfile(path):
        raise TraceError(str(source), 0, "not a zip file (no central directory: truncated or damaged)")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
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
    folder_name = prefix.rstrip("/").rsplit("/", 1)[-1]
    return _from_manifest(data, f"{source}:{member}", folder_name, lambda n: prefix + n in names,
                          lambda n: _zip_loader(path, prefix + n), lambda n: f"{source}:{prefix}{n}")


# A zip file starts with a local file header (or, empty, with the end of the central directory).
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def _looks_like_zip(path: Path) -> bool:
    if path.suffix.lower() == ".zip":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) in _ZIP_MAGIC
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def open_source(source: str | Path) -> list[TraceSource]:
    """Every trace in a source: a .log/.jsonl(.gz) file, a folder with manifest.json (or with
    logs/manifest.json, as `unzip logs.zip` leaves it), or a logs.zip."""
    path = Path(source)
    if not path.exists():
        raise UsageError(f"{source}: no such file or folder")
    if path.is_dir():
        return _open_folder(path, source)
    if _looks_like_zip(path):
        return _open_zip(path, source)
    return _named([TraceSource(path.name, path.name, str(path), None, _file_loader(path))], [path.name])


def select(sources: list[TraceSource], prefixes: list[str] | None, source_label: str = "") -> list[TraceSource]:
    """The traces whose name or title is one of `prefixes`, else starts with it (case-insensitive).

    An exact name wins over prefixes: `resnet32` picks the trace named so even beside `resnet32-8`.
    """
    if not prefixes:
        return sources
    chosen = []
    for prefix in prefixes:
        p = prefix.lower()
        hits = [s for s in sources if p in (s.name.lower(), s.title.lower())]
        if not hits:
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
