"""Damaged synthetic traces through the real CLI: one line `dtrlab: path:line: reason` and exit 2,
or a run on both engines that agree on every counter; never a traceback.

The traces come from trace.synth and trace.write; the damage is what a truncated, hand-edited or
badly merged log suffers: a line dropped, a RELEASE repeated, a line moved, a use renamed.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import cli_invoke
from dtrlab.trace.read import Call, Copy, CopyFrom, Mutate, Release
from dtrlab.trace.synth import synthetic_trace
from dtrlab.trace.write import write_trace

COUNTERS = ("outcome", "clock_ns", "evictions", "eager_evictions", "distinct_evicted", "peak_bytes", "remat_ns")


def _names_used(ins) -> list[str]:
    if isinstance(ins, (Call, Mutate)):
        return list(ins.args)
    if isinstance(ins, (Copy, CopyFrom)):
        return [ins.src]
    return []


@st.composite
def damaged(draw):
    """A synthetic trace with one to three kinds of damage applied."""
    instructions = list(synthetic_trace(draw(st.integers(0, 10_000), label="seed"),
                                        n_ops=draw(st.integers(2, 25), label="n_ops")))
    names = sorted({n for x in instructions for n in _names_used(x)}) or ["x"]
    for _ in range(draw(st.integers(1, 3), label="damages")):
        kind = draw(st.sampled_from(["drop", "repeat-release", "move", "rename", "release-early"]), label="kind")
        n = len(instructions)
        i = draw(st.integers(0, n - 1), label="at")
        if kind == "drop" and n > 1:
            del instructions[i]
        elif kind == "repeat-release":
            releases = [k for k, x in enumerate(instructions) if isinstance(x, Release)]
            if releases:
                k = draw(st.sampled_from(releases), label="release")
                instructions.insert(draw(st.integers(k + 1, n), label="to"), instructions[k])
        elif kind == "move":
            x = instructions.pop(i)
            instructions.insert(draw(st.integers(0, n - 1), label="to"), x)
        elif kind == "rename":
            users = [k for k, x in enumerate(instructions) if _names_used(x)]
            if users:
                k = draw(st.sampled_from(users), label="user")
                x = instructions[k]
                new = draw(st.sampled_from(names + ["ghost"]), label="new name")
                if isinstance(x, (Call, Mutate)):
                    args = list(x.args)
                    args[draw(st.integers(0, len(args) - 1), label="arg")] = new
                    instructions[k] = x._replace(args=tuple(args))
                else:
                    instructions[k] = x._replace(src=new)
        elif kind == "release-early":
            users = [k for k, x in enumerate(instructions) if _names_used(x)]
            if users:
                k = draw(st.sampled_from(users), label="user")
                name = draw(st.sampled_from(_names_used(instructions[k])), label="name")
                instructions.insert(k, Release(0, name))
    return instructions


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(instructions=damaged(), ratio=st.sampled_from(["0.3", "0.6", "1.0"]),
       runtime_policy=st.sampled_from([("eager-optimized", "dtr"), ("optimized", "dtr-eq"), ("eager", "lru"),
                                       ("lazy", "size")]),
       strict=st.booleans())
def test_damaged_trace_is_one_line_or_runs_on_both_engines(tmp_path_factory, instructions, ratio,
                                                           runtime_policy, strict):
    runtime, policy = runtime_policy
    path = tmp_path_factory.mktemp("damaged") / "t.jsonl"
    write_trace(instructions, path)
    results = {}
    for engine in ("python", "c"):
        code, out, err = cli_invoke("simulate", path, "-r", ratio, "--runtime", runtime, "-p", policy,
                                    "--engine", engine,
                                    "--json", "--no-cache", *(["--strict"] if strict else []))
        if code == 2:
            assert out == "" and err.count("\n") == 1, err
            assert re.fullmatch(rf"dtrlab: {re.escape(str(path))}:\d+: \S.*\n", err), err
            assert not results, "the engines disagree on whether the trace is valid"
            return
        assert code == 0, err
        results[engine] = {k: json.loads(out)[k] for k in COUNTERS}
    assert results["python"] == results["c"]
