"""`dtrlab traces fetch` against a local HTTP server serving simrd's logs.zip: the good file and broken ones.

The served file is ../shared/traces/simrd-layout/logs.zip; its sha256 is computed here, from its bytes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import SHARED, SIMRD_ZIP, needs_shared
from dtrlab.trace import resolve_source
from dtrlab.trace.fetch import SHA256, SIZE_BYTES, fetch_set, list_sets, sets_dir
from test_cli import one_line_error, run


def flipped(body: bytes) -> bytes:
    """The same length, a few bytes in the middle inverted."""
    mid = len(body) // 2
    return body[:mid] + bytes(b ^ 0xFF for b in body[mid:mid + 16]) + body[mid + 16:]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the name http.server calls)
        body = self.server.body
        self.server.hits.append(self.path)
        if self.path == "/logs.zip":
            self._send(body)
        elif self.path == "/corrupt.zip":
            self._send(flipped(body))
        elif self.path == "/interrupted.zip":
            # Content-Length promises the whole file; half is sent, then the connection closes.
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
        elif self.path == "/not-a-zip":
            self._send(b"<html>a page, not a zip</html>\n")
        else:
            self.send_error(404, "Not Found")

    def _send(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # quiet: the test output is the assertions'
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.body = SIMRD_ZIP.read_bytes() if SIMRD_ZIP.is_file() else b""
    httpd.hits = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def url(server, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def served_sha256(server) -> str:
    return hashlib.sha256(server.body).hexdigest()


def fetch(server, path: str, *extra, sha256: str | None = None):
    return run("traces", "fetch", "--url", url(server, path), "--sha256", sha256 or served_sha256(server), *extra)


def leftovers() -> list[Path]:
    """Every file in the sets' folder, hidden temporary files included."""
    folder = sets_dir()
    return sorted(folder.iterdir()) if folder.exists() else []


# --- success -------------------------------------------------------------------------------------


@needs_shared
def test_fetch_stores_the_served_file_and_a_second_fetch_downloads_nothing(server):
    result = fetch(server, "/logs.zip")
    assert result.exit_code == 0, result.output
    stored = sets_dir() / "study.zip"
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == served_sha256(server)
    assert leftovers() == [stored]
    # Off a terminal the progress is one line on stderr; stdout names the stored file.
    assert result.stderr.splitlines() == [
        f"downloaded {len(server.body):,} bytes from {url(server, '/logs.zip')} in "
        f"{result.stderr.split(' in ')[1].split(' s,')[0]} s, sha256 checked"]
    assert result.stdout == f"study: {stored} (use --traces study)\n"

    hits = len(server.hits)
    again = fetch(server, "/logs.zip")
    assert again.exit_code == 0, again.output
    assert "already fetched" in again.stdout and again.stderr == ""
    assert len(server.hits) == hits  # no request at all


@needs_shared
def test_list_and_remove_show_what_is_stored(server):
    assert run("traces", "list").stdout.startswith("no trace sets in ")
    assert fetch(server, "/logs.zip", "--name", "mirror").exit_code == 0
    listed = json.loads(run("traces", "list", "--json").stdout)
    assert listed == [{"name": "mirror", "path": str(sets_dir() / "mirror.zip"), "size_bytes": len(server.body),
                       "sha256": served_sha256(server), "public": False}]
    table = run("traces", "list").stdout
    assert "mirror" in table and served_sha256(server) in table and "another file" in table
    assert run("traces", "remove", "mirror").exit_code == 0
    assert leftovers() == []
    one_line_error(run("traces", "remove", "mirror"), "no trace set named 'mirror'")


@needs_shared
def test_a_named_set_resolves_to_its_stored_file(server):
    assert fetch(server, "/logs.zip").exit_code == 0
    assert resolve_source(None, "study") == str(sets_dir() / "study.zip")


@needs_shared
def test_traces_study_picks_the_fetched_set_in_trace_info(server):
    assert fetch(server, "/logs.zip").exit_code == 0
    result = run("trace", "info", "--traces", "study", "--trace", "resnet32", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "resnet32"


@needs_shared
def test_traces_study_picks_the_fetched_set_in_simulate(server):
    assert fetch(server, "/logs.zip").exit_code == 0
    picked = run("simulate", "--traces", "study", "--trace", "resnet32", "--ratio", "0.5", "--json")
    assert picked.exit_code == 0, picked.output
    # The same bytes as the public folder's resnet32: the same run.
    direct = run("simulate", SHARED / "traces" / "dtr-iclr21", "--trace", "resnet32", "--ratio", "0.5", "--json")
    assert json.loads(picked.stdout) == json.loads(direct.stdout)


# --- failures: one line, exit 2, nothing left behind ---------------------------------------------


@needs_shared
@pytest.mark.parametrize("path, sha256, fragment", [
    ("/corrupt.zip", None, "(a damaged or different file); nothing stored"),
    ("/interrupted.zip", None, "the download broke off after"),
    ("/missing.zip", None, "HTTP 404 Not Found"),
    ("/logs.zip", "0" * 64, f"is not the expected {'0' * 64}"),
    ("/logs.zip", SHA256, f"but the public traces are {SIZE_BYTES:,}; nothing stored"),
], ids=["corrupt", "interrupted", "404", "wrong-sha256", "public-sha256-wrong-size"])
def test_a_failed_fetch_is_one_line_and_leaves_nothing(server, path, sha256, fragment):
    line = one_line_error(fetch(server, path, sha256=sha256), fragment)
    assert url(server, path) in line
    assert leftovers() == []
    assert list_sets() == []


@needs_shared
def test_the_interrupted_download_says_how_far_it_got(server):
    half = len(server.body) // 2
    one_line_error(fetch(server, "/interrupted.zip"), f"after {half:,} of {len(server.body):,} bytes")


def test_a_body_that_is_no_zip_is_refused_even_with_its_own_sha256(server):
    body = b"<html>a page, not a zip</html>\n"
    one_line_error(fetch(server, "/not-a-zip", sha256=hashlib.sha256(body).hexdigest()), "not a zip file")
    assert leftovers() == []


@needs_shared
def test_ctrl_c_during_the_download_removes_the_temporary_file(server):
    def progress(total_bytes):
        assert total_bytes == len(server.body)

        def advance(n):
            assert [p for p in leftovers() if p.name.endswith(".part")]  # it is being written
            raise KeyboardInterrupt

        return advance

    with pytest.raises(KeyboardInterrupt):
        fetch_set("study", url(server, "/logs.zip"), served_sha256(server), progress=progress)
    assert leftovers() == []


@needs_shared
def test_a_name_holding_another_file_is_not_replaced(server):
    assert fetch(server, "/logs.zip").exit_code == 0
    before = (sets_dir() / "study.zip").read_bytes()
    one_line_error(fetch(server, "/logs.zip", sha256="1" * 64), "holds another file", "traces remove study")
    assert (sets_dir() / "study.zip").read_bytes() == before


@pytest.mark.parametrize("args, fragment", [
    (["--sha256", "xyz"], "--sha256 takes 64 hex digits"),
    (["--name", "../evil"], "a trace set's name is letters"),
    (["--url", "ftp://example.invalid/logs.zip"], "must be an http:// or https:// address"),
])
def test_bad_fetch_arguments(args, fragment):
    one_line_error(run("traces", "fetch", *args), fragment)
    assert leftovers() == []


# --- --traces NAME -------------------------------------------------------------------------------


def test_an_unknown_set_says_how_to_fetch_it():
    one_line_error(run("simulate", "--traces", "study", "--ratio", "0.5"),
                   "no trace set named 'study'", "`dtrlab traces fetch`")
    one_line_error(run("trace", "info", "--traces", "mine"), "`dtrlab traces fetch --name mine`")


@pytest.mark.parametrize("command", [["trace", "info"], ["simulate", "--ratio", "0.5"], ["sweep", "--ratios", "0.5"],
                                     ["scan", "--ratios", "0.5"], ["explain-oom", "--ratio", "0.5"],
                                     ["ablate", "--ratios", "0.5"], ["reproduce"]])
def test_source_and_traces_together_is_a_usage_error(tmp_path, command):
    one_line_error(run(*command, tmp_path, "--traces", "study"), "give SOURCE or --traces study, not both")
