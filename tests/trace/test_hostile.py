"""Hostile and unusual traces through the real CLI: one line `dtrlab: path:line: reason` and exit 2,
or, where the input is legal, a run on both engines.

Each case writes files into a fresh folder and runs `dtrlab trace info` (or the command named)
through `dtrlab.cli.main`; the expected line number is counted by hand from the case's lines.
"""

from __future__ import annotations

import gzip
import json
import os
import zipfile

import pytest

from conftest import cli_invoke
from trace_helpers import GOOD, call, const, obj

INT64_OVER = str(2**63)


def trace(*lines) -> str:
    return "\n".join(lines) + "\n"


def lines(*parts) -> list[str]:
    out: list[str] = []
    for part in parts:
        out.extend([part] if isinstance(part, str) else part)
    return out


def release(name):
    return obj("RELEASE", NAME=name)


def copy(dst, src, kind="COPY"):
    return obj(kind, DST=dst, SRC=src)


def mutate(name, args, indices):
    return obj("MUTATE", NAME=name, ARGS=args, MUTATE=indices, TIME="3")


def zip_bytes(members: dict[str, str]) -> bytes:
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buffer.getvalue()


def manifest(*logs, has_start=False) -> str:
    return json.dumps({"models": [{"name": f"m{i}", "log": log, "has_start": has_start}
                                  for i, log in enumerate(logs)]})


T = "t.jsonl"  # the usual target
G = trace(*GOOD)  # const a (lines 1-2), f(a) -> b (lines 3-5)
AFTER = lines(GOOD, release("b"))  # ... and RELEASE b on line 6

# (id, files, target, extra args, expected): expected is "ok", (file, line, fragment) for a
# TraceError, or (None, fragment) for a usage error. A file is text, bytes, or ("link", target).
CASES = [
    # --- legal, if unusual: they load, and both engines run them --------------------------------
    ("copy-from-itself", {T: trace(*GOOD, copy("b", "b", "COPY_FROM"), *call("g", ["b"], ["c"]))}, T, [], "ok"),
    ("copy-from-same-tensor", {T: trace(*GOOD, copy("c", "b"), copy("c", "b", "COPY_FROM"),
                                        *call("g", ["c"], ["d"]))}, T, [], "ok"),
    ("second-release-lenient", {T: trace(*GOOD, *call("g", ["b"], ["c"]), release("b"), release("b"))}, T, [], "ok"),
    ("second-release-keeps-the-copy", {T: trace(*GOOD, copy("c", "b"), release("b"), release("b"),
                                                *call("g", ["c"], ["d"]), release("c"))}, T, [], "ok"),
    ("release-unknown-lenient", {T: trace(*GOOD, release("nobody"))}, T, [], "ok"),
    ("mutate-a-copied-name", {T: trace(*GOOD, copy("c", "b"), mutate("add_", ["b", "c"], [0]),
                                       *call("g", ["c", "b"], ["d"]))}, T, [], "ok"),
    ("mutate-one-name-twice", {T: trace(*GOOD, mutate("swap_", ["b", "b"], [0, 1]),
                                        *call("g", ["b"], ["d"]))}, T, [], "ok"),
    ("non-ascii-names", {T: trace(*const("α"), *call("conv✓", ["α"], ["β"]))}, T, [], "ok"),
    ("a-100k-character-name", {T: trace(*const("a"), *call("f" * 100_000, ["a"], ["b"]))}, T, [], "ok"),
    ("byte-order-mark-and-blank-lines", {T: "\ufeff" + G.replace("\n", "\n\n")}, T, [], "ok"),
    ("json-integers", {T: trace(obj("CONSTANT", NAME="a"), obj("MEMORY", NAME="a", MEMORY=4),
                                *call("f", ["a"], ["b"], time=7))}, T, [], "ok"),
    ("a-call-without-arguments", {T: trace(*call("rand", [], ["r"]), *call("f", ["r", "r"], ["s"]))}, T, [], "ok"),
    ("one-argument-many-times", {T: trace(*GOOD, *call("sum", ["b"] * 500, ["c"]), release("b"),
                                          release("c"))}, T, [], "ok"),
    ("an-alias-of-an-alias", {T: trace(*GOOD, *call("view", ["b"], ["v"], aliases=["0"]),
                                       *call("view", ["v"], ["w"], aliases=["0"]), release("b"),
                                       release("v"))}, T, [], "ok"),
    ("unknown-annotation", {T: trace(obj("ANNOTATE", ANNOTATION="WHATEVER"), *GOOD)}, T, [], "ok"),
    ("zero-sizes-and-times", {T: trace(*const("a", "0"), *call("f", ["a"], ["b"], time="0", sizes=["0"]))},
     T, [], "ok"),
    # --- uses after a RELEASE, second RELEASEs, redefinitions ---------------------------------
    ("call-after-release", {T: trace(*AFTER, *call("g", ["b"], ["c"]))}, T, [],
     (T, 7, "tensor 'b' is used after its RELEASE (line 6)")),
    ("copy-after-release", {T: trace(*AFTER, copy("c", "b"))}, T, [], (T, 7, "used after its RELEASE (line 6)")),
    ("mutate-after-release", {T: trace(*AFTER, mutate("relu_", ["b"], [0]))}, T, [],
     (T, 7, "used after its RELEASE (line 6)")),
    ("copy-from-into-a-released-name", {T: trace(*GOOD, *call("g", ["a"], ["c"]), release("b"),
                                                 copy("b", "c", "COPY_FROM"))}, T, [],
     (T, 10, "tensor 'b' is used after its RELEASE (line 9)")),
    ("copy-from-a-released-name", {T: trace(*GOOD, *call("g", ["a"], ["c"]), release("b"),
                                            copy("c", "b", "COPY_FROM"))}, T, [],
     (T, 10, "tensor 'b' is used after its RELEASE (line 9)")),
    ("use-of-a-copy-source-released-twice", {T: trace(*GOOD, copy("c", "b"), release("c"), release("c"),
                                                      *call("g", ["c"], ["d"]))}, T, [],
     (T, 9, "tensor 'c' is used after its RELEASE (line 7)")),
    ("redefined-after-release", {T: trace(*AFTER, *call("g", ["a"], ["b"]))}, T, [],
     (T, 7, "tensor 'b' is defined again after its RELEASE (line 6)")),
    ("second-release-strict", {T: trace(*AFTER, release("b"))}, T, ["--strict"],
     (T, 7, "second RELEASE of 'b' (first on line 6)")),
    ("release-unknown-strict", {T: trace(*GOOD, release("nobody"))}, T, ["--strict"],
     (T, 6, "RELEASE of undefined tensor 'nobody'")),
    ("copy-onto-a-live-name", {T: trace(*GOOD, copy("a", "b"))}, T, [], (T, 6, "tensor 'a' is defined twice")),
    # --- text that no output can print -----------------------------------------------------------
    # json.dumps writes a lone surrogate as its escape, as a hostile trace would.
    ("lone-surrogate-operator", {T: trace(*const("a"), *call("f\udc80", ["a"], ["b"]))},
     T, [], (T, 3, "field NAME holds a lone surrogate \\udc80")),
    ("lone-surrogate-argument", {T: G + trace(*call("g", ["b\ud800"], ["c"]))},
     T, [], (T, 6, "field ARGS holds a lone surrogate \\ud800")),
    ("lone-surrogate-result", {T: G + trace(*call("g", ["b"], ["c\udfff"]))},
     T, [], (T, 6, "field RESULT holds a lone surrogate \\udfff")),
    ("lone-surrogate-constant", {T: '{"INSTRUCTION":"CONSTANT","NAME":"\\udc80"}\n'}, T, [],
     (T, 1, "field NAME holds a lone surrogate")),
    ("lone-surrogate-annotation", {T: '{"INSTRUCTION":"ANNOTATE","ANNOTATION":"\\ud83d"}\n' + G}, T, [],
     (T, 1, "field ANNOTATION holds a lone surrogate \\ud83d")),
    ("surrogate-pair-is-text", {T: trace(*const("a"), *call("f\U0001F600", ["a"], ["b"]))}, T, [], "ok"),
    # --- zip files --------------------------------------------------------------------------------
    ("zip-signature-then-junk", {"logs.zip": b"PK\x03\x04" + b"\x00junk" * 50}, "logs.zip", [],
     ("logs.zip", 0, "not a zip file")),
    ("empty-zip-file", {"logs.zip": b""}, "logs.zip", [], ("logs.zip", 0, "not a zip file")),
    ("text-named-zip", {"logs.zip": G}, "logs.zip", [], ("logs.zip", 0, "not a zip file")),
    ("truncated-zip", {"logs.zip": zip_bytes({"logs/manifest.json": manifest("x.log"), "logs/x.log": G})[:-30]},
     "logs.zip", [], ("logs.zip", 0, "not a zip file")),
    ("zip-manifest-climbs-out", {"logs.zip": zip_bytes({"logs/manifest.json": manifest("../x.log"), "x.log": G})},
     "logs.zip", [], ("logs.zip:logs/manifest.json", 1, "names '../x.log', which is outside the source")),
    ("zip-manifest-absolute", {"logs.zip": zip_bytes({"logs/manifest.json": manifest("/logs/x.log"),
                                                       "logs/x.log": G})},
     "logs.zip", [], ("logs.zip:logs/manifest.json", 1, "which is outside the source")),
    ("zip-member-missing", {"logs.zip": zip_bytes({"logs/manifest.json": manifest("logs/y.log"), "logs/x.log": G})},
     "logs.zip", [], ("logs.zip:logs/manifest.json", 1, "manifest names 'logs/y.log', which is not there")),
    ("zip-bad-member", {"logs.zip": zip_bytes({"logs/manifest.json": manifest("logs/x.log"),
                                               "logs/x.log": "not json\n"})},
     "logs.zip", [], ("logs.zip:logs/x.log", 1, "malformed JSON")),
    # --- manifests in folders ---------------------------------------------------------------------
    ("manifest-climbs-out", {"d/manifest.json": manifest("../x.log"), "x.log": G}, "d", [],
     ("d/manifest.json", 1, "names '../x.log', which is outside the source")),
    ("manifest-climbs-out-inside-a-path", {"d/manifest.json": manifest("sub/../../x.log"), "x.log": G}, "d", [],
     ("d/manifest.json", 1, "which is outside the source")),
    ("manifest-absolute-path", {"d/manifest.json": manifest("/etc/hostname")}, "d", [],
     ("d/manifest.json", 1, "names '/etc/hostname', which is outside the source")),
    ("manifest-windows-path", {"d/manifest.json": manifest("C:\\x.log")}, "d", [],
     ("d/manifest.json", 1, "which is outside the source")),
    ("manifest-link-out", {"d/manifest.json": manifest("x.log"), "d/x.log": ("link", "../y.log"), "y.log": G},
     "d", [], ("d/manifest.json", 1, "names 'x.log', which is outside the source")),
    ("manifest-models-not-objects", {"d/manifest.json": json.dumps({"models": ["x.log"]})}, "d", [],
     ("d/manifest.json", 1, "manifest model #0 has no 'log' file name")),
    ("manifest-start-never-comes", {"d/manifest.json": manifest("x.log", has_start=True), "d/x.log": G}, "d", [],
     ("d/x.log", 5, "the START annotation never comes")),
    # --- one bad line ------------------------------------------------------------------------------
    ("malformed-json", {T: G + '{"INSTRUCTION": "RELEASE"\n'}, T, [], (T, 6, "malformed JSON")),
    ("nul-line", {T: G + "\x00\n"}, T, [], (T, 6, "malformed JSON")),
    ("nested-too-deeply", {T: G + "[" * 50_000 + "\n"}, T, [], (T, 6, "nested too deeply")),
    ("unknown-instruction", {T: G + obj("FREE", NAME="b") + "\n"}, T, [], (T, 6, "unknown instruction 'FREE'")),
    ("negative-memory", {T: trace(*const("a", "-4"))}, T, [], (T, 2, "field MEMORY is negative")),
    ("time-past-64-bits", {T: trace(*const("a"), *call("f", ["a"], ["b"], time=INT64_OVER))}, T, [],
     (T, 3, "too large for a 64-bit integer")),
    ("nan-time", {T: trace(*const("a"), '{"INSTRUCTION":"CALL","NAME":"f","ARGS":["a"],"RESULT":["b"],"TIME":NaN}')},
     T, [], (T, 3, "field TIME must be an integer")),
    ("fractional-memory", {T: trace(obj("CONSTANT", NAME="a"), obj("MEMORY", NAME="a", MEMORY=1.5))}, T, [],
     (T, 2, "field MEMORY must be an integer")),
    ("boolean-time", {T: trace(*const("a"), obj("CALL", NAME="f", ARGS=["a"], RESULT=["b"], TIME=True))}, T, [],
     (T, 3, "field TIME must be an integer")),
    ("alias-below-minus-one", {T: trace(*const("a"), *call("f", ["a"], ["b"], aliases=["-2"]))}, T, [],
     (T, 5, "field ALIAS is below -1")),
    ("not-utf8", {T: G.encode() + b'{"INSTRUCTION":"RELEASE","NAME":"\xff"}\n'}, T, [], (T, 6, "not UTF-8 text")),
    # --- structure ---------------------------------------------------------------------------------
    ("memory-missing-after-call", {T: trace(*const("a"), obj("CALL", NAME="f", ARGS=["a"], RESULT=["b"], TIME="1"),
                                            release("a"))}, T, [], (T, 4, "needs MEMORY for 'b' here")),
    ("alias-out-of-range", {T: trace(*const("a"), *call("f", ["a"], ["b"], aliases=["1"]))}, T, [],
     (T, 5, "ALIAS 1 is out of range for 1 arguments")),
    ("mutate-index-out-of-range", {T: G + mutate("relu_", ["b"], [1]) + "\n"}, T, [],
     (T, 6, "MUTATE index 1 is out of range")),
    ("undefined-argument", {T: G + trace(*call("g", ["zz"], ["c"]))}, T, [], (T, 6, "reference to undefined tensor 'zz'")),
    ("result-defined-twice", {T: G + trace(*call("g", ["a"], ["b"]))}, T, [], (T, 6, "tensor 'b' is defined twice")),
    ("same-result-twice", {T: trace(*const("a"), *call("f", ["a"], ["b", "b"]))}, T, [],
     (T, 3, "CALL names the same result twice")),
    ("stray-alias", {T: G + obj("ALIAS", NAME="b", ALIAS="-1") + "\n"}, T, [],
     (T, 6, "ALIAS for 'b' does not follow a CALL or CONSTANT that names it")),
    ("totals-past-64-bits", {T: trace(*const("a", str(2**62)), *const("c", str(2**62)), *const("d", str(2**62)))},
     T, [], (T, 3, "total storage size does not fit in 64 bits")),
    ("empty-file", {T: ""}, T, [], (T, 1, "empty trace: no instructions")),
    ("blank-lines-only", {T: "\n\n  \n"}, T, [], (T, 1, "empty trace: no instructions")),
    ("nothing-after-start", {T: G + obj("ANNOTATE", ANNOTATION="START") + "\n"}, T, [],
     (T, 6, "empty trace: nothing after the START annotation")),
    ("only-releases", {T: trace(release("a"), release("b"))}, T, [], (T, 2, "empty trace: no operators")),
    ("truncated-gzip", {"t.jsonl.gz": gzip.compress(G.encode())[:-9]}, "t.jsonl.gz", [],
     ("t.jsonl.gz", 0, "corrupt gzip data")),
    # --- budgets -----------------------------------------------------------------------------------
    ("budget-of-2^63", {T: G}, T, ["simulate", "-b", INT64_OVER], (None, "--budget-bytes must be a non-negative")),
    ("budget-of-2^64", {T: G}, T, ["simulate", "-b", str(2**64)], (None, "below 2^63")),
    ("negative-budget", {T: G}, T, ["simulate", "-b", "-1"], (None, "--budget-bytes must be a non-negative")),
    ("budget-of-2^63-minus-1", {T: G}, T, ["simulate", "-b", str(2**63 - 1), "--engine", "c"], "ran"),
    ("ratio-past-64-bits", {T: G}, T, ["simulate", "-r", "1e30"], (None, "the budget of ratio 1e+30 on t")),
    ("sweep-budget-of-2^63", {T: G}, T, ["sweep", "-b", INT64_OVER], (None, "--budget-bytes must be a non-negative")),
    ("sweep-ratio-past-64-bits", {T: G}, T, ["sweep", "-r", "1e30"], (None, "the budget of ratio 1e+30 on t")),
    ("sweep-negative-budget", {T: G}, T, ["sweep", "-b", "-5"], (None, "--budget-bytes must be a non-negative")),
]


def write_files(root, files) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple):
            os.symlink(content[1], path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def command(args, target, store) -> list:
    if args and args[0] in ("simulate", "sweep"):
        extra = ["--store", store] if args[0] == "sweep" else ["--no-cache"]
        return [args[0], target, *args[1:], *extra]
    return ["trace", "info", target, "--no-cache", *args]


def _trace_error_reasons() -> list[tuple[str, str]]:
    """Every reason a TraceError is raised with in the reader and the lowering, read from their source
    as (where, pattern): the reason's literal text, with `.*` where it interpolates a value."""
    import ast
    import re
    from pathlib import Path

    import dtrlab.trace

    found = []
    for module in ("read.py", "lower.py"):
        path = Path(dtrlab.trace.__file__).parent / module
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name == "TraceError" and len(node.args) == 3:
                reason = node.args[2]
            elif name == "_err" and len(node.args) == 2:
                reason = node.args[1]
            else:
                continue
            for expr in ([reason.body, reason.orelse] if isinstance(reason, ast.IfExp) else [reason]):
                if isinstance(expr, ast.Constant):
                    pattern = re.escape(expr.value)
                elif isinstance(expr, ast.JoinedStr):
                    pattern = ".*".join(re.escape(v.value) if isinstance(v, ast.Constant) else "" for v in expr.values)
                else:
                    continue  # `_err`'s own body: TraceError(self.path, line, reason)
                found.append((f"{module}:{node.lineno}", pattern))
    return found


@pytest.mark.slow
def test_the_cases_reach_many_distinct_reasons_of_the_reader(tmp_path):
    """Many cases, told apart by the code: the error lines the CLI prints for them match at least 28
    distinct reasons the reader and the lowering raise (the others are met one by one in test_errors),
    so two cases that the code lumps under one reason count once."""
    import re

    assert len({c[0] for c in CASES}) == len(CASES) >= 70
    lines = []
    for name, files, target, args, expected in CASES:
        if expected in ("ok", "ran"):
            continue
        root = tmp_path / name
        write_files(root, files)
        lines.append(cli_invoke(*command(args, root / target, root / "store.duckdb")).stderr)
    reasons = _trace_error_reasons()
    assert len(reasons) >= 40  # the search above finds the raise sites, or this test would pass on nothing
    met = {pattern for _, pattern in reasons if any(re.search(pattern, line) for line in lines)}
    assert len(met) >= 28, sorted(met)


@pytest.mark.parametrize("name, files, target, args, expected", CASES, ids=[c[0] for c in CASES])
def test_hostile_input(tmp_path, name, files, target, args, expected):
    write_files(tmp_path, files)
    path = tmp_path / target
    code, out, err = cli_invoke(*command(args, path, tmp_path / "store.duckdb"))
    if expected == "ran":
        assert (code, err) == (0, "")
        return
    if expected == "ok":
        assert (code, err) == (0, ""), err
        # Legal input runs on both engines, under a budget that forces evictions.
        for engine in ("python", "c"):
            code, out, err = cli_invoke("simulate", path, "-r", "0.5", "--engine", engine, "--json",
                                        "--no-cache", *args)
            assert code == 0, err
            assert json.loads(out)["outcome"] in ("ok", "oom")
        return
    assert code == 2, (out, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    line = err.rstrip("\n")
    if expected[0] is None:
        assert line.startswith("dtrlab: ") and expected[1] in line, line
        return
    where, number, fragment = expected
    file_part = str(tmp_path / where.split(":")[0]) + (":" + where.split(":", 1)[1] if ":" in where else "")
    assert line.startswith(f"dtrlab: {file_part}:{number}: "), line
    assert fragment in line, line
