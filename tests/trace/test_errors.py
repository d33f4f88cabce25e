"""Every way a trace can be wrong gives a TraceError naming the file and the line, nothing else."""

from __future__ import annotations

import gzip
import json
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TRACES, needs_shared
from dtrlab.errors import TraceError, UsageError
from dtrlab.trace import load, load_one
from dtrlab.trace.lower import RELEASE, Program, lower
from dtrlab.trace.read import TraceSource, parse_bytes
from trace_helpers import GOOD, call, const, obj

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def load_lines(tmp_path, lines, strict=False, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path, load_one(path, cache=False, strict=strict)


def error_of(tmp_path, lines, strict=False, name="t.jsonl") -> TraceError:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as info:
        load(path, cache=False, strict=strict)
    err = info.value
    assert err.path == str(path)
    assert str(err) == f"{path}:{err.line}: {err.reason}"
    return err


def test_the_good_trace_loads(tmp_path):
    _, program = load_lines(tmp_path, GOOD)
    assert program.n_ops == 2


# --- one line at a time: reader checks ------------------------------------------------------

@pytest.mark.parametrize("bad, reason", [
    ('{"INSTRUCTION": "CONSTANT", "NAME": "c"', "malformed JSON"),
    ("not json at all", "malformed JSON"),
    ('[' * 100_000, "malformed JSON: nested too deeply"),
    ('{"INSTRUCTION":"MEMORY","NAME":"c","MEMORY":' + "9" * 5000 + "}", "malformed JSON: a number with too many digits"),
    ('["CONSTANT", "c"]', "an instruction must be a JSON object"),
    (obj("FROB", NAME="c"), "unknown instruction 'FROB'"),
    (json.dumps({"NAME": "c"}), "missing field INSTRUCTION"),
    (obj("CONSTANT"), "CONSTANT is missing field NAME"),
    (obj("CALL", NAME="f", ARGS=["a"], RESULT=["z"]), "CALL is missing field TIME"),
    (obj("COPY", DST="z"), "COPY is missing field SRC"),
    (obj("MUTATE", NAME="m", ARGS=["a"], TIME="1"), "MUTATE is missing field MUTATE"),
    (obj("CONSTANT", NAME=""), "field NAME must be a non-empty string"),
    (obj("CONSTANT", NAME=7), "field NAME must be a non-empty string"),
    (obj("CALL", NAME="f", ARGS="a", RESULT=["z"], TIME="1"), "field ARGS must be a list of names"),
    (obj("CALL", NAME="f", ARGS=["a"], RESULT=[], TIME="1"), "CALL has no results"),
    (obj("CALL", NAME="f", ARGS=["a"], RESULT=["z"], TIME="1.5"), "field TIME must be an integer, got '1.5'"),
    (obj("CALL", NAME="f", ARGS=["a"], RESULT=["z"], TIME="ten"), "field TIME must be an integer"),
    (obj("CALL", NAME="f", ARGS=["a"], RESULT=["z"], TIME=True), "field TIME must be an integer, got True"),
    (obj("CALL", NAME="f", ARGS=["a"], RESULT=["z"], TIME=2.0), "field TIME must be an integer, got 2.0"),
    (obj("CALL", NAME="f", ARGS=["a"], RESULT=["z"], TIME="-1"), "field TIME is negative: -1"),
    (obj("MUTATE", NAME="m", ARGS=["a"], MUTATE=[0], TIME="-5"), "field TIME is negative: -5"),
    (obj("MEMORY", NAME="a", MEMORY="-4"), "field MEMORY is negative: -4"),
    (obj("MEMORY", NAME="a", MEMORY=str(2**63)), "field MEMORY is too large for a 64-bit integer"),
    (obj("MEMORY", NAME="a", MEMORY="9" * 5000), "field MEMORY is too large for a 64-bit integer"),
    (obj("ALIAS", NAME="a", ALIAS="-2"), "field ALIAS is below -1: -2"),
    (obj("MUTATE", NAME="m", ARGS=["a"], MUTATE=[], TIME="1"), "field MUTATE must be a non-empty list"),
    (obj("MUTATE", NAME="m", ARGS=["a"], MUTATE=["0"], TIME="1"), "field MUTATE must be a non-empty list"),
    (obj("MUTATE", NAME="m", ARGS=["a"], MUTATE=[1], TIME="1"), "MUTATE index 1 is out of range for 1 arguments"),
    (obj("ANNOTATE"), "ANNOTATE is missing field ANNOTATION"),
])
def test_a_bad_line_is_named(tmp_path, bad, reason):
    # The bad line is line 3, after a constant; blank lines count as lines.
    err = error_of(tmp_path, const("a") + [bad] + GOOD[2:])
    assert err.line == 3
    assert err.reason.startswith(reason), err.reason


def test_blank_lines_count_in_line_numbers(tmp_path):
    err = error_of(tmp_path, const("a") + ["", "   ", "{oops"])
    assert err.line == 5


def test_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(("\n".join(GOOD) + "\n").encode() + b'{"INSTRUCTION":"CONSTANT","NAME":"\xff"}\n')
    with pytest.raises(TraceError) as info:
        load(path, cache=False)
    assert (info.value.line, info.value.reason) == (6, "not UTF-8 text")


def test_a_byte_order_mark_is_not_an_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + ("\n".join(GOOD) + "\n").encode())
    assert load_one(path, cache=False).n_ops == 2


# --- structure: lowering checks ------------------------------------------------------------


@pytest.mark.parametrize("lines, line, reason", [
    # a CALL's MEMORY/ALIAS lines missing or out of order
    (const("a") + [obj("CALL", NAME="f", ARGS=["a"], RESULT=["b"], TIME="1")],
     3, "CALL f (line 3) needs MEMORY for 'b' here"),
    (const("a") + [obj("CALL", NAME="f", ARGS=["a"], RESULT=["b"], TIME="1"), obj("MEMORY", NAME="b", MEMORY="4")],
     4, "CALL f (line 3) needs ALIAS for 'b' here"),
    (const("a") + [obj("CALL", NAME="f", ARGS=["a"], RESULT=["b"], TIME="1"), obj("ALIAS", NAME="b", ALIAS="-1"),
                   obj("MEMORY", NAME="b", MEMORY="4")],
     4, "CALL f (line 3) needs MEMORY for 'b' here"),
    (const("a") + [obj("CALL", NAME="f", ARGS=["a"], RESULT=["b"], TIME="1"), obj("MEMORY", NAME="z", MEMORY="4"),
                   obj("ALIAS", NAME="b", ALIAS="-1")],
     4, "CALL f (line 3) needs MEMORY for 'b' here"),
    (const("a") + [obj("CALL", NAME="f", ARGS=["a"], RESULT=["b"], TIME="1"), obj("MEMORY", NAME="b", MEMORY="4"),
                   obj("RELEASE", NAME="a")],
     5, "CALL f (line 3) needs ALIAS for 'b' here"),
    # two results: the second result's lines come first
    (const("a") + [obj("CALL", NAME="f", ARGS=["a"], RESULT=["b", "c"], TIME="1"),
                   obj("MEMORY", NAME="c", MEMORY="4"), obj("ALIAS", NAME="c", ALIAS="-1"),
                   obj("MEMORY", NAME="b", MEMORY="4"), obj("ALIAS", NAME="b", ALIAS="-1")],
     4, "CALL f (line 3) needs MEMORY for 'b' here"),
    # MEMORY, ALIAS after all results, then one more MEMORY than results
    (const("a") + call("f", ["a"], ["b"]) + [obj("MEMORY", NAME="b", MEMORY="4")],
     6, "MEMORY for 'b' does not follow a CALL or CONSTANT that names it"),
    ([obj("ALIAS", NAME="b", ALIAS="-1")] + GOOD, 1, "ALIAS for 'b' does not follow"),
    (const("a") + call("f", ["a"], ["b"], aliases=["1"]), 5, "ALIAS 1 is out of range for 1 arguments"),
    ([obj("CONSTANT", NAME="a")] + GOOD[2:], 2, "CONSTANT 'a' (line 1) needs its MEMORY line here"),
    ([obj("CONSTANT", NAME="a")], 1, "CONSTANT 'a' (line 1) needs its MEMORY line here"),
    # references to undefined tensors
    (const("a") + call("f", ["a", "nope"], ["b"]), 3, "reference to undefined tensor 'nope'"),
    (GOOD + [obj("COPY", DST="c", SRC="nope")], 6, "reference to undefined tensor 'nope'"),
    (GOOD + [obj("COPY_FROM", DST="nope", SRC="a")], 6, "reference to undefined tensor 'nope'"),
    (GOOD + [obj("COPY_FROM", DST="a", SRC="nope")], 6, "reference to undefined tensor 'nope'"),
    (GOOD + [obj("MUTATE", NAME="m", ARGS=["b", "nope"], MUTATE=[0], TIME="1")], 6,
     "reference to undefined tensor 'nope'"),
    # redefinitions
    (GOOD + const("a"), 6, "tensor 'a' is defined twice"),
    (GOOD + call("g", ["a"], ["b"]), 6, "tensor 'b' is defined twice"),
    (GOOD + [obj("COPY", DST="b", SRC="a")], 6, "tensor 'b' is defined twice"),
    (const("a") + call("f", ["a"], ["b", "b"]), 3, "CALL names the same result twice"),
    (GOOD + [obj("MUTATE", NAME="m", ARGS=["b", "a"], MUTATE=[0, 0], TIME="1")], 6,
     "MUTATE names the same argument twice"),
    # nothing to run
    (["", "  "], 1, "empty trace: no instructions"),
    ([obj("ANNOTATE", ANNOTATION="BACKWARD"), obj("RELEASE", NAME="x")], 2, "empty trace: no operators"),
    (GOOD + [obj("ANNOTATE", ANNOTATION="START")], 6, "empty trace: nothing after the START annotation"),
])
def test_structural_errors_name_the_line(tmp_path, lines, line, reason):
    err = error_of(tmp_path, lines)
    assert err.line == line
    assert err.reason.startswith(reason), err.reason


def test_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    with pytest.raises(TraceError) as info:
        load(path, cache=False)
    assert (info.value.line, info.value.reason) == (1, "empty trace: no instructions")


def test_totals_that_overflow_64_bits_are_corrupt_input(tmp_path):
    big = str(2**62)
    lines = const("a") + call("f", ["a"], ["b"], time=big) + call("g", ["a"], ["c"], time=big)
    assert error_of(tmp_path, lines).line == 6
    lines = const("a", big) + const("b", big) + const("c", big)
    err = error_of(tmp_path, lines)
    assert (err.line, err.reason) == (3, "total storage size does not fit in 64 bits")


def test_release_of_an_unknown_name_is_ignored_unless_strict(tmp_path):
    lines = GOOD + [obj("RELEASE", NAME="ghost"), obj("RELEASE", NAME="b")]
    _, program = load_lines(tmp_path, lines)
    # only the known name's release is a schedule step
    assert int((program.step_kind == RELEASE).sum()) == 1
    err = error_of(tmp_path, lines, strict=True)
    assert (err.line, err.reason) == (6, "RELEASE of undefined tensor 'ghost'")


# --- the START annotation and the manifest --------------------------------------------------


def write_folder(tmp_path, lines, has_start):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "m-1.log").write_text("\n".join(lines) + "\n")
    (folder / "manifest.json").write_text(json.dumps({"models": [{"name": "M", "log": "m-1.log",
                                                                    "has_start": has_start}]}))
    return folder


def test_start_that_never_comes(tmp_path):
    folder = write_folder(tmp_path, GOOD, has_start=True)
    with pytest.raises(TraceError) as info:
        load(folder, cache=False)
    err = info.value
    assert err.path == str(folder / "m-1.log")
    assert (err.line, err.reason) == (5, "the manifest says has_start but the START annotation never comes")


def test_without_has_start_the_warm_up_is_lowered_too(tmp_path):
    warm = [obj("CONSTANT", NAME="w"), obj("MEMORY", NAME="w", MEMORY="4"), obj("ANNOTATE", ANNOTATION="START")]
    (program,) = load(write_folder(tmp_path, warm + GOOD, has_start=False), cache=False)
    assert program.op_names == ("constant", "constant", "f")
    assert program.op_line.tolist() == [1, 4, 6]  # lines of the file, START or not
    single = tmp_path / "single.log"
    single.write_text("\n".join(warm + GOOD) + "\n")
    assert load_one(single, cache=False).op_names == ("constant", "f")  # a lone file skips to START


@pytest.mark.parametrize("manifest, reason", [
    ("{not json", "malformed manifest"),
    (json.dumps({"logs": []}), "manifest.json must hold an object with a list 'models'"),
    (json.dumps({"models": [{"name": "x"}]}), "manifest model #0 has no 'log' file name"),
    (json.dumps({"models": [{"log": "missing.log"}]}), "manifest names 'missing.log', which is not there"),
])
def test_bad_manifests(tmp_path, manifest, reason):
    (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(TraceError) as info:
        load(tmp_path, cache=False)
    assert info.value.reason.startswith(reason)
    assert info.value.path == str(tmp_path / "manifest.json")


def test_corrupt_gzip_and_zip(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(("\n".join(GOOD) + "\n").encode())[:-12])
    with pytest.raises(TraceError, match="corrupt gzip data"):
        load(path, cache=False)
    archive = tmp_path / "logs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("logs/manifest.json", json.dumps({"models": [{"log": "m-1.log"}]}))
        zf.writestr("logs/m-1.log", "\n".join(GOOD) * 50)
    data = bytearray(archive.read_bytes())
    at = data.index(b"CALL")  # damage the stored member: its CRC no longer matches
    data[at:at + 4] = b"LLAC"
    archive.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="corrupt zip member") as info:
        load(archive, cache=False)
    assert info.value.path == f"{archive}:logs/m-1.log"


def test_usage_errors_for_sources(tmp_path):
    with pytest.raises(UsageError, match="no such file or folder"):
        load(tmp_path / "nope.log", cache=False)
    with pytest.raises(UsageError, match="neither manifest.json nor trace files"):
        load(tmp_path, cache=False)
    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.log", "\n".join(GOOD))
    with pytest.raises(UsageError, match="without manifest.json"):
        load(archive, cache=False)


# --- fuzz: whatever the bytes, a TraceError or a Program -------------------------------------


def lower_bytes(data: bytes, has_start=None):
    source = TraceSource("fuzz", "fuzz", "fuzz.log", has_start, lambda: data)
    try:
        program = lower(parse_bytes(source.read_bytes(), source))
    except TraceError as err:
        assert err.path == "fuzz.log" and err.line >= 0
        return err
    assert isinstance(program, Program)
    return program


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(data):
    lower_bytes(data)


field_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(), st.floats(),
                         st.sampled_from(["a", "b", "c", "-1", "0", "1", "12", "START", "BACKWARD", ""]),
                         st.lists(st.sampled_from(["a", "b", "c", 0, 1, -1]), max_size=3))
instruction_objects = st.fixed_dictionaries(
    {"INSTRUCTION": st.sampled_from(["CONSTANT", "MEMORY", "ALIAS", "CALL", "MUTATE", "COPY", "COPY_FROM",
                                     "RELEASE", "ANNOTATE", "OTHER"])},
    optional={k: field_values for k in ("NAME", "MEMORY", "ALIAS", "ARGS", "RESULT", "TIME", "MUTATE",
                                        "DST", "SRC", "ANNOTATION")})


@FUZZ
@given(st.lists(instruction_objects, max_size=30), st.sampled_from([None, True, False]))
def test_fuzz_plausible_instructions(objects, has_start):
    data = "\n".join(json.dumps(o) for o in objects).encode()
    lower_bytes(data, has_start)


@pytest.fixture(scope="module")
def unet_bytes():
    (path,) = TRACES.glob("unet-*.log")
    return path.read_bytes()


@pytest.mark.slow
@needs_shared
@FUZZ
@given(st.data())
def test_fuzz_truncated_and_damaged_real_trace(unet_bytes, data):
    blob = unet_bytes
    cut = data.draw(st.integers(0, len(blob)), label="cut")
    lower_bytes(blob[:cut], has_start=True)
    lines = blob.split(b"\n")
    i = data.draw(st.integers(0, len(lines) - 1), label="line")
    how = data.draw(st.sampled_from(["drop", "duplicate", "swap", "flip"]), label="how")
    if how == "drop":
        del lines[i]
    elif how == "duplicate":
        lines.insert(i, lines[i])
    elif how == "swap" and i + 1 < len(lines):
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif how == "flip" and lines[i]:
        j = data.draw(st.integers(0, len(lines[i]) - 1), label="byte")
        lines[i] = lines[i][:j] + bytes([lines[i][j] ^ data.draw(st.integers(1, 255), label="xor")]) + lines[i][j + 1:]
    lower_bytes(b"\n".join(lines), has_start=True)
    lower_bytes(gzip.compress(blob)[:cut // 4])
