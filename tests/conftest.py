"""Shared fixtures: where ../shared is, the lowered public traces (read once per session), and the
requirements a test may declare (`needs_shared`, `needs_compiled`), which skip on a user's machine and
fail in CI (DTRLAB_REQUIRE_SHARED=1, DTRLAB_REQUIRE_COMPILED=1) so that a safety net never goes quiet; and
`cli_invoke`, the one way tests run a dtrlab command in-process."""

from __future__ import annotations

import functools
import gc
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DTRLAB_SHARED", REPO.parent / "shared"))
TRACES = SHARED / "traces" / "dtr-iclr21"
REFERENCE = SHARED / "reference"
SIMRD_ZIP = SHARED / "traces" / "simrd-layout" / "logs.zip"

# A marker a test (or module, as `pytestmark`) carries; `pytest_runtest_setup` below enforces it.
needs_shared = pytest.mark.needs_shared
needs_compiled = pytest.mark.needs_compiled
needs_simrd_zip = pytest.mark.needs_simrd_zip


def _missing_shared() -> str | None:
    if not TRACES.is_dir() or not (REFERENCE / "parity.jsonl").is_file():
        return (f"the public traces and reference results are not at {SHARED} "
                "(set DTRLAB_SHARED to the shared folder)")
    return None


def _missing_simrd_zip() -> str | None:
    return _missing_shared() or (None if SIMRD_ZIP.is_file() else f"simrd's logs.zip is not at {SIMRD_ZIP}")


def _missing_compiled() -> str | None:
    from dtrlab.sim.simulate import compiled_available

    if not compiled_available():
        return "the compiled engine is not built (a C compiler is needed when dtrlab is installed)"
    return None


_REQUIREMENTS = {
    "needs_shared": ("DTRLAB_REQUIRE_SHARED", _missing_shared),
    "needs_compiled": ("DTRLAB_REQUIRE_COMPILED", _missing_compiled),
    "needs_simrd_zip": ("DTRLAB_REQUIRE_SHARED", _missing_simrd_zip),
}


def require(marker: str) -> None:
    """Skip the running test when `marker`'s requirement is not met, or fail where CI demands it."""
    variable, missing = _REQUIREMENTS[marker]
    reason = missing()
    if reason is None:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{reason}, and {variable}=1 says it must be", pytrace=False)
    pytest.skip(reason)


def require_shared() -> None:
    require("needs_shared")


def require_compiled() -> None:
    require("needs_compiled")


def have_compiled() -> bool:
    """Whether a test's compiled-engine half can run: False on a user's machine without the build,
    a failure where CI requires the build (so the half is never dropped without a word)."""
    variable, missing = _REQUIREMENTS["needs_compiled"]
    reason = missing()
    if reason is not None and os.environ.get(variable) == "1":
        pytest.fail(f"{reason}, and {variable}=1 says it must be", pytrace=False)
    return reason is None


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_shared: needs ../shared (traces and reference results)")
    config.addinivalue_line("markers", "needs_compiled: needs the compiled engine")
    config.addinivalue_line("markers", "needs_simrd_zip: needs ../shared/traces/simrd-layout/logs.zip")


def pytest_runtest_setup(item):
    # What earlier tests left (torch, compiled graphs, lowered traces, hypothesis' caches) is
    # moved out of the collector's reach: without this every full collection inside a test walks
    # that whole heap, and the suite ran 2-4x slower than its tests do one by one. What the test
    # before this one let go is collected first, so nothing of it is kept.
    gc.collect()
    gc.freeze()
    for marker in _REQUIREMENTS:
        if item.get_closest_marker(marker) is not None:
            require(marker)


@functools.lru_cache(maxsize=None)
def public_program(name: str):
    """The lowered public trace `name` (e.g. "resnet32"), without touching the user's cache."""
    from dtrlab.trace import load

    (program,) = load(TRACES, [name], cache=False)
    return program


@functools.lru_cache(maxsize=None)
def _goldens() -> dict:
    return json.loads((Path(__file__).parent / "goldens.json").read_text())


def golden(name: str) -> dict:
    """A pinned figure from tests/goldens.json, which says where each came from."""
    return _goldens()[name]


@functools.lru_cache(maxsize=None)
def parity_rows() -> tuple[dict, ...]:
    with open(REFERENCE / "parity.jsonl") as f:
        return tuple(json.loads(line) for line in f if line.strip())


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Tests never write into the user's cache folder, nor into their data folder (fetched traces)."""
    monkeypatch.setenv("DTRLAB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "dtrlab-cache"))
    monkeypatch.setenv("DTRLAB_DATA_DIR", str(tmp_path_factory.mktemp("dtrlab-data")))


class CliResult:
    """What `cli_invoke` gives: typer's testing Result (`exit_code`, `stdout`, `stderr`, `output`, the
    two interleaved, and `exception`, a bug in dtrlab), which also unpacks as (exit_code, stdout, stderr)."""

    def __init__(self, result) -> None:
        self._result = result

    def __getattr__(self, name):
        return getattr(self._result, name)

    def __iter__(self):
        return iter((self.exit_code, self.stdout, self.stderr))

    def __repr__(self) -> str:
        return repr(self._result)


def cli_invoke(*args, input: str | None = None, env: dict[str, str | None] | None = None,
               check: bool = False) -> CliResult:
    """Run one dtrlab command in-process, as the `dtrlab` console script (`dtrlab.cli.main`) runs it,
    with `args` as strings: the one way tests drive the CLI when they read its exit code and output.

    A user's mistake is exit code 2 and one line on stderr; a bug is kept in `exception`, with its
    traceback. `input` is stdin; `env` sets (None: unsets) environment variables for this run only;
    `check` asserts that the command succeeded, as subprocess.run's does."""
    import sys
    import traceback

    from typer.testing import CliRunner, Result

    from dtrlab.cli import main

    runner = CliRunner()
    exception = exc_info = None
    with runner.isolation(input=input, env=env) as (stdout, stderr, output):
        try:
            main([str(a) for a in args])
            code = 0  # pragma: no cover - main always exits
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception as exc:  # a bug: kept for the test to show
            code, exception, exc_info = 1, exc, sys.exc_info()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        streams = stdout.getvalue(), stderr.getvalue(), output.getvalue()
    result = CliResult(Result(runner, *streams, return_value=None, exit_code=code, exception=exception,
                              exc_info=exc_info))
    if check:
        shown = "".join(traceback.format_exception(*exc_info)) if exc_info else result.stderr
        assert code == 0, f"dtrlab {' '.join(map(str, args))}: exit code {code}\n{shown}"
    return result
