"""`dtrlab traces add NAME FILE`: a logs.zip already downloaded becomes a trace set offline, with the
checks of a download (sha256 first); a file that fails one is one line, exit 2, and nothing stored.

The file is ../shared/traces/simrd-layout/logs.zip: simrd's layout with six of the eight public traces,
so its sha256 is not the pinned one of the public file; its own is computed here, from its bytes.
"""

from __future__ import annotations

import hashlib

from conftest import SIMRD_ZIP, needs_simrd_zip
from dtrlab.trace.fetch import SHA256, list_sets, sets_dir
from test_cli import one_line_error, run

pytestmark = needs_simrd_zip


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _nothing_stored() -> None:
    assert list_sets() == []
    assert not sets_dir().exists() or list(sets_dir().iterdir()) == []  # no temporary file either


def test_a_file_that_is_not_the_public_one_is_refused():
    got = _sha256(SIMRD_ZIP)
    assert got != SHA256  # six of the eight traces: not the authors' file
    line = one_line_error(run("traces", "add", "study", SIMRD_ZIP))
    assert line == (f"dtrlab: {SIMRD_ZIP}: sha256 {got} is not the expected {SHA256} (not the DTR authors' "
                    f"logs.zip); nothing stored (--sha256 {got} adds this file as it is)")
    _nothing_stored()


def test_a_file_with_its_sha256_given_is_added_and_read():
    got = _sha256(SIMRD_ZIP)
    result = run("traces", "add", "mine", SIMRD_ZIP, "--sha256", got.upper())
    assert result.exit_code == 0, result.output
    (stored,) = list_sets()
    assert (stored.name, stored.sha256, stored.size_bytes, stored.public) == \
        ("mine", got, SIMRD_ZIP.stat().st_size, False)
    assert stored.path.read_bytes() == SIMRD_ZIP.read_bytes()
    assert result.stdout == (f"mine: {stored.path} ({stored.size_bytes:,} bytes from {SIMRD_ZIP}, sha256 checked; "
                             "use --traces mine)\n")
    again = run("traces", "add", "mine", SIMRD_ZIP, "--sha256", got)
    assert again.exit_code == 0 and "already there" in again.stdout
    info = run("trace", "info", "--traces", "mine", "-t", "resnet32", "--json")
    assert info.exit_code == 0, info.output  # the set is a source like a fetched one


def test_a_name_that_holds_another_file_is_kept(tmp_path):
    got = _sha256(SIMRD_ZIP)
    assert run("traces", "add", "mine", SIMRD_ZIP, "--sha256", got).exit_code == 0
    other = tmp_path / "other.zip"
    other.write_bytes(SIMRD_ZIP.read_bytes() + b"\0")  # still a zip: its directory is found from the end
    one_line_error(run("traces", "add", "mine", other, "--sha256", _sha256(other)),
                   "holds another file", "traces remove mine")
    assert [s.sha256 for s in list_sets()] == [got]


def test_files_that_are_no_trace_set_are_refused(tmp_path):
    page = tmp_path / "logs.zip"
    page.write_text("<html>a page, not a zip</html>\n")
    one_line_error(run("traces", "add", "study", page, "--sha256", _sha256(page)), "not a zip file", "nothing stored")
    one_line_error(run("traces", "add", "study", tmp_path / "missing.zip"), "missing.zip: no such file")
    one_line_error(run("traces", "add", "study", SIMRD_ZIP, "--sha256", "abc"), "--sha256 takes 64 hex digits")
    _nothing_stored()
