"""The writer is the reader's inverse: random valid traces survive write -> read -> lower unchanged."""

from __future__ import annotations

import gzip
import io
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TRACES, needs_shared
from dtrlab.trace import load, load_one
from dtrlab.trace.read import (BACKWARD, START, Alias, Annotate, Call, Constant, Copy, CopyFrom, Memory,
                               Mutate, Release, open_source, parse_line, read_trace)
from dtrlab.trace.synth import SYNTHETIC, synthetic_trace
from dtrlab.trace.write import format_instruction, format_trace, write_trace
from trace_helpers import assert_same_program, lower_directly

# Bounded: the suite stays fast. A trace is many random draws, hence the large-base-example check is off.
FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])


def _body(instructions):
    starts = [i for i, x in enumerate(instructions) if isinstance(x, Annotate) and x.annotation == START]
    return tuple(instructions[starts[0] + 1:]) if starts else tuple(instructions)


# --- format_instruction / parse_line on arbitrary instructions -----------------------------

names = st.text(min_size=1, max_size=8)  # any characters: quotes, newlines, lone surrogates
sizes = st.integers(0, 2**63 - 1)
name_lists = st.lists(names, max_size=4).map(tuple)


@st.composite
def mutates(draw):
    args = draw(st.lists(names, min_size=1, max_size=4).map(tuple))
    idx = draw(st.lists(st.integers(0, len(args) - 1), min_size=1, max_size=len(args), unique=True))
    return Mutate(1, draw(names), args, tuple(idx), draw(sizes))


instructions = st.one_of(
    st.builds(Constant, st.just(1), names),
    st.builds(Memory, st.just(1), names, sizes),
    st.builds(Alias, st.just(1), names, st.integers(-1, 2**63 - 1)),
    st.builds(Call, st.just(1), names, name_lists, st.lists(names, min_size=1, max_size=4).map(tuple), sizes),
    mutates(),
    st.builds(Copy, st.just(1), names, names),
    st.builds(CopyFrom, st.just(1), names, names),
    st.builds(Release, st.just(1), names),
    st.builds(Annotate, st.just(1), st.sampled_from([START, BACKWARD, SYNTHETIC]) | names),
)


@FAST
@given(instructions)
def test_parse_line_inverts_format_instruction(ins):
    line = format_instruction(ins)
    assert "\n" not in line  # one instruction, one line, whatever the names hold
    assert parse_line(line, "x.jsonl", 1) == ins


@needs_shared
@pytest.mark.parametrize("name", ["resnet32", "unet", "lstm"])
def test_writer_reproduces_public_traces_byte_for_byte(name, tmp_path):
    (path,) = TRACES.glob(f"{name}-*.log")
    original = path.read_bytes()
    parsed = [parse_line(line, str(path), i) for i, line in enumerate(original.decode().splitlines(), 1)]
    out = tmp_path / "copy.log"
    write_trace(parsed, out)
    assert out.read_bytes() == original


# --- synthetic traces ------------------------------------------------------------------------


_SYNTH_TEXT = ("import sys; from dtrlab.trace.synth import synthetic_trace; from dtrlab.trace.write import format_trace; "
               "sys.stdout.write(format_trace(synthetic_trace(3, n_ops=25)))")


def test_synthetic_trace_is_deterministic_and_seed_dependent():
    """The seed alone fixes the trace: not the global random state, nor the interpreter's string hashing."""
    import os
    import random
    import subprocess
    import sys

    random.seed(1)
    first = synthetic_trace(3, n_ops=25)
    random.seed(2)
    random.random()
    assert synthetic_trace(3, n_ops=25) == first
    # Fresh interpreters, because the hash seed (set and dict order of strings) is fixed at start-up.
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=os.pathsep.join(sys.path))
        done = subprocess.run([sys.executable, "-c", _SYNTH_TEXT], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout == format_trace(first)
    assert synthetic_trace(3, n_ops=25) != synthetic_trace(4, n_ops=25)


def test_synthetic_traces_cover_every_instruction_kind():
    seen = Counter()
    multi_output = aliases = 0
    for seed in range(5):
        trace = synthetic_trace(seed, n_ops=30)
        assert trace[0] == Annotate(1, SYNTHETIC)
        assert [x.line for x in trace] == list(range(1, len(trace) + 1))
        seen.update(type(x) for x in trace)
        multi_output += sum(isinstance(x, Call) and len(x.results) > 1 for x in trace)
        aliases += sum(isinstance(x, Alias) and x.alias >= 0 for x in trace)
        assert Annotate(0, BACKWARD)[1:] in [x[1:] for x in trace if isinstance(x, Annotate)]
    assert set(seen) == {Constant, Memory, Alias, Call, Mutate, Copy, CopyFrom, Release, Annotate}
    assert multi_output > 0 and aliases > 0


def test_synthetic_trace_has_the_operators_asked_for():
    for n_ops in (1, 7, 50):
        program = lower_directly(synthetic_trace(11, n_ops=n_ops), strict=True)
        assert int((~program.op_constant).sum()) == n_ops


@pytest.mark.parametrize("kwargs", [dict(n_ops=0), dict(max_args=0), dict(max_outputs=0)])
def test_synthetic_trace_rejects_impossible_shapes(kwargs):
    with pytest.raises(ValueError):
        synthetic_trace(0, **{"n_ops": 5, **kwargs})


# --- the round trip ------------------------------------------------------------------------------


@pytest.mark.slow
@FAST
@given(rng=st.randoms(use_true_random=False), n_ops=st.integers(1, 40), max_outputs=st.integers(1, 4),
       start=st.booleans(), backward=st.booleans(), compress=st.booleans())
def test_write_read_lower_equals_lowering_directly(tmp_path_factory, rng, n_ops, max_outputs, start, backward, compress):
    trace = synthetic_trace(n_ops=n_ops, max_outputs=max_outputs, start=start, backward=backward, rng=rng)
    path = tmp_path_factory.mktemp("rt") / ("synthetic.jsonl.gz" if compress else "synthetic.jsonl")
    write_trace(trace, path)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == compress

    (source,) = open_source(path)
    text = read_trace(source)
    assert text.instructions == _body(trace)  # line numbers included
    (program,) = load(path, cache=False, strict=True)
    assert_same_program(program, lower_directly(trace))
    # ...and through the cache, which must hand back the same arrays.
    assert_same_program(load_one(path, cache=True), program)


def test_write_trace_to_open_files(tmp_path):
    trace = synthetic_trace(5, n_ops=6)
    text = format_trace(trace)
    buffer = io.StringIO()
    write_trace(trace, buffer)
    assert buffer.getvalue() == text
    binary = io.BytesIO()
    write_trace(trace, binary)
    assert binary.getvalue() == text.encode()
    zipped = io.BytesIO()
    write_trace(trace, zipped, gzip=True)
    assert gzip.decompress(zipped.getvalue()) == text.encode()
    with pytest.raises(TypeError):
        write_trace(trace, io.StringIO(), gzip=True)
    # gzip=False wins over the file name; the bytes do not depend on the time they were written.
    write_trace(trace, tmp_path / "plain.gz", gzip=False)
    assert (tmp_path / "plain.gz").read_text() == text
    write_trace(trace, tmp_path / "a.jsonl.gz")
    write_trace(trace, tmp_path / "b.jsonl.gz")
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_format_instruction_rejects_other_values():
    with pytest.raises(TypeError):
        format_instruction(("CALL", "x"))


# --- the committed example ---------------------------------------------------------------------


def test_the_committed_example_is_synthetic_trace_seed_1():
    from importlib.resources import files

    data = (files("dtrlab") / "data" / "examples" / "tiny.jsonl").read_bytes()
    assert data == format_trace(synthetic_trace(1, n_ops=8)).encode()


def test_the_committed_example_reads_lowers_and_simulates():
    from importlib.resources import as_file, files

    from dtrlab.sim.simulate import budget_from_ratio, simulate

    with as_file(files("dtrlab") / "data" / "examples" / "tiny.jsonl") as path:
        program = load_one(path, cache=False, strict=True)
    assert program.n_ops == 10
    assert simulate(program, budget_from_ratio(program, 1.0)).outcome == "ok"
    tight = simulate(program, budget_from_ratio(program, 0.7))
    assert tight.outcome == "ok" and tight.evictions > 0
