"""Fetched trace sets: the DTR authors' logs.zip, downloaded once (or added from a file already
downloaded), checked, and stored under a name.

Owns where the public traces come from (URL, sha256, size), the data folder that holds the sets,
and the download: progress, then checks, then one rename, so a set is there whole or not at all.
"""

from __future__ import annotations

# hashlib, tempfile, zipfile and urllib load in the functions that use them: the CLI imports this
# module for the defaults of `traces fetch`, and `dtrlab --help` should not pay for them.
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import UsageError

# The repository carries no licence, so dtrlab fetches the file from its authors instead of shipping it.
URL = ("https://raw.githubusercontent.com/uwsampl/dtr-prototype/"
       "eff53cc4804cc7d6246a6e5086861ce2b846f62b/simrd/logs.zip")
SHA256 = "63579a07a6e7ce063f5ba49450dfb96a9f3995df736c423c27e1336f4365e02a"
SIZE_BYTES = 1_019_528
DEFAULT_NAME = "study"
MANIFEST = "logs/manifest.json"  # where simrd's logs.zip keeps its manifest

SUFFIX = ".zip"
_PART = ".part"  # a download in progress; never an entry
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK_BYTES = 64 * 1024
_TIMEOUT_S = 60.0  # per socket operation, not for the whole download


@dataclass(frozen=True)
class StoredSet:
    """A trace set in the data folder: its name, file, size and the sha256 of its bytes."""

    name: str
    path: Path
    size_bytes: int
    sha256: str

    @property
    def public(self) -> bool:
        """Whether these are the bytes of the DTR authors' logs.zip."""
        return self.sha256 == SHA256

    def to_dict(self) -> dict:
        return {"name": self.name, "path": str(self.path), "size_bytes": self.size_bytes,
                "sha256": self.sha256, "public": self.public}


@dataclass(frozen=True)
class Fetched:
    """What `fetch_set` did: the stored set, and how many bytes it downloaded in how long (0 when it was there)."""

    stored: StoredSet
    downloaded_bytes: int
    wall_s: float


def data_dir() -> Path:
    """$DTRLAB_DATA_DIR, else the user's data folder for dtrlab (platformdirs)."""
    explicit = os.environ.get("DTRLAB_DATA_DIR")
    if explicit:
        return Path(explicit)
    import platformdirs  # late: only the commands that use a trace set pay for it

    return Path(platformdirs.user_data_dir("dtrlab", appauthor=False))


def sets_dir() -> Path:
    """The folder of fetched trace sets, one `<name>.zip` each."""
    return data_dir() / "traces"


def _path(name: str) -> Path:
    if not _NAME.fullmatch(name):
        raise UsageError(f"a trace set's name is letters, digits, '_', '.' and '-' (at most 64, "
                         f"starting with a letter or digit), got {name!r}")
    return sets_dir() / f"{name}{SUFFIX}"


def _fetch_hint(name: str) -> str:
    return "dtrlab traces fetch" + ("" if name == DEFAULT_NAME else f" --name {name}")


def stored_set(name: str) -> Path:
    """The file of the fetched trace set `name`; a UsageError that says how to fetch it when there is none."""
    path = _path(name)
    if not path.is_file():
        raise UsageError(f"no trace set named {name!r} (fetch it with `{_fetch_hint(name)}`; "
                         f"`dtrlab traces list` shows what is there)")
    return path


def _sha256_of(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _described(name: str, path: Path) -> StoredSet:
    return StoredSet(name, path, path.stat().st_size, _sha256_of(path))


def list_sets() -> list[StoredSet]:
    """Every fetched set, by name."""
    folder = sets_dir()
    if not folder.is_dir():
        return []
    paths = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix == SUFFIX and _NAME.fullmatch(p.stem))
    return [_described(p.stem, p) for p in paths]


def remove_set(name: str) -> Path:
    """Delete the fetched set `name`; the path it had."""
    path = stored_set(name)
    path.unlink()
    return path


def check_sha256(value: str) -> str:
    """A sha256 as 64 lower-case hex digits; a UsageError otherwise."""
    lowered = value.strip().lower()
    if not _SHA256.fullmatch(lowered):
        raise UsageError(f"--sha256 takes 64 hex digits, got {value!r}")
    return lowered


def fetch_set(name: str = DEFAULT_NAME, url: str = URL, sha256: str = SHA256, *,
              progress: Callable[[int | None], Callable[[int], None]] | None = None) -> Fetched:
    """Download `url` into the set `name` unless it is there already with the same sha256.

    progress(total_bytes or None) is called once a download starts and returns a function
    that is told each chunk's size. The file is written to a temporary name in the sets'
    folder, checked (length, size, sha256, a zip with logs/manifest.json) and only then
    renamed into place; on any failure the temporary file is removed and no set appears.
    """
    sha256 = check_sha256(sha256)
    path = _path(name)
    t0 = time.perf_counter()
    there = _already(name, path, sha256, "--name")
    if there is not None:
        return Fetched(there, 0, time.perf_counter() - t0)
    size = _store(name, path, url, sha256, lambda out: _download(url, out, progress))
    return Fetched(StoredSet(name, path, size, sha256), size, time.perf_counter() - t0)


def add_set(name: str, file: str | os.PathLike, sha256: str = SHA256) -> tuple[StoredSet, bool]:
    """Store a logs.zip already downloaded (`file`) as the set `name`, with the checks of a download:
    its sha256 first (the public file's by default), then a zip with logs/manifest.json. The set and
    whether it was added now (False: the same bytes were there already under that name)."""
    import shutil

    sha256 = check_sha256(sha256)
    source = Path(file)
    if not source.is_file():
        raise UsageError(f"{source}: no such file")
    path = _path(name)
    got = _sha256_of(source)
    if got != sha256:
        what = "not the DTR authors' logs.zip" if sha256 == SHA256 else "not the file expected"
        raise UsageError(f"{source}: sha256 {got} is not the expected {sha256} ({what}); nothing stored "
                         f"(--sha256 {got} adds this file as it is)")
    there = _already(name, path, sha256, "NAME")
    if there is not None:
        return there, False

    def copy(out) -> int:
        with open(source, "rb") as f:
            shutil.copyfileobj(f, out, _CHUNK_BYTES)
        return source.stat().st_size

    size = _store(name, path, str(source), sha256, copy)
    return StoredSet(name, path, size, sha256), True


def _already(name: str, path: Path, sha256: str, rename: str) -> StoredSet | None:
    """The set `name` when it holds these bytes already; None when there is none; a UsageError when
    it holds another file (`rename`: the option or argument that picks another name)."""
    if not path.is_file():
        return None
    there = _described(name, path)
    if there.sha256 != sha256:
        raise UsageError(f"{path}: the trace set {name!r} holds another file (sha256 {there.sha256}); "
                         f"`dtrlab traces remove {name}` first, or pick another {rename}")
    return there


def _store(name: str, path: Path, origin: str, sha256: str, fill: Callable[..., int]) -> int:
    """Write a set through `fill(out) -> bytes written` to a temporary name beside `path`, check it
    (_check, its lines naming `origin`) and rename it into place; on any failure nothing is left."""
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{name}.", suffix=_PART)
    except OSError as exc:
        raise UsageError(f"{path.parent}: cannot write the trace sets' folder: {exc.strerror or exc}") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            size = fill(out)
        _check(origin, tmp, size, sha256)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


def _download(url: str, out, progress) -> int:
    """Copy the body at `url` into `out`; the number of bytes. Every failure is one UsageError."""
    import http.client
    import urllib.error
    import urllib.request

    from ..version import __version__

    if not url.startswith(("https://", "http://")):
        raise UsageError(f"{url}: --url must be an http:// or https:// address")
    request = urllib.request.Request(url, headers={"User-Agent": f"dtrlab/{__version__}"})
    got = 0
    total = None
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            advance = progress(total) if progress else None
            while chunk := response.read(_CHUNK_BYTES):
                out.write(chunk)
                got += len(chunk)
                if advance:
                    advance(len(chunk))
    except urllib.error.HTTPError as exc:
        raise UsageError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise UsageError(f"{url}: cannot download: {exc.reason}") from None
    except (http.client.HTTPException, OSError) as exc:  # IncompleteRead, a reset, a timeout
        of = f" of {total:,}" if total is not None else ""
        raise UsageError(f"{url}: the download broke off after {got:,}{of} bytes "
                         f"({type(exc).__name__}); nothing stored") from None
    if total is not None and got != total:
        raise UsageError(f"{url}: the download broke off after {got:,} of {total:,} bytes; nothing stored")
    return got


def _check(url: str, tmp: Path, size: int, sha256: str) -> None:
    """The downloaded file is the one asked for, and a logs.zip of traces."""
    import zipfile

    if sha256 == SHA256 and size != SIZE_BYTES:
        raise UsageError(f"{url}: {size:,} bytes, but the public traces are {SIZE_BYTES:,}; nothing stored")
    got = _sha256_of(tmp)
    if got != sha256:
        raise UsageError(f"{url}: sha256 {got} is not the expected {sha256} "
                         "(a damaged or different file); nothing stored")
    try:
        with zipfile.ZipFile(tmp) as zf:
            has_manifest = MANIFEST in zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise UsageError(f"{url}: not a zip file ({exc}); nothing stored") from None
    if not has_manifest:
        raise UsageError(f"{url}: a zip file without {MANIFEST}, not a set of traces; nothing stored")


@contextmanager
def progress_bar(console) -> Iterator[Callable[[int | None], Callable[[int], None]]]:
    """A `progress` argument for fetch_set: a rich bar of bytes on `console` (drawn only on a terminal)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with Progress(TextColumn("downloading"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  console=console, transient=True, disable=not console.is_terminal) as bar:
        def start(total_bytes: int | None) -> Callable[[int], None]:
            task = bar.add_task("download", total=total_bytes)
            return lambda n: bar.advance(task, n)

        yield start


__all__ = ["DEFAULT_NAME", "MANIFEST", "SHA256", "SIZE_BYTES", "URL", "Fetched", "StoredSet", "add_set", "check_sha256",
           "data_dir", "fetch_set", "list_sets", "progress_bar", "remove_set", "sets_dir", "stored_set"]
