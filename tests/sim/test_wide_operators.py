"""Operators with more outputs than the compiled engine keeps on its stack (MAX_OUTPUTS): the default
engine falls back to the Python one, `--engine c` says why it cannot, and at the limit both agree."""

from __future__ import annotations

import pytest

from conftest import needs_compiled
from dtrlab.errors import UsageError
from dtrlab.sim.cengine import MAX_OUTPUTS
from dtrlab.sim.simulate import budget_from_ratio, simulate
from dtrlab.trace.read import Alias, Call, Constant, Memory, Release
from helpers import program_of


def wide_program(n_outputs: int):
    """One operator of `n_outputs` outputs, each then read by an operator of its own, under a budget
    that makes the wide one be evicted and recomputed."""
    ins = []

    def add(make, *fields):
        ins.append(make(len(ins) + 1, *fields))

    def call(name, args, results, time_ns, sizes):
        add(Call, name, args, results, time_ns)
        for result, size in zip(results, sizes):
            add(Memory, result, size)
            add(Alias, result, -1)

    add(Constant, "w")
    add(Memory, "w", 64)
    outs = tuple(f"o{i}" for i in range(n_outputs))
    call("wide", ("w",), outs, 5_000, [1000 + 8 * i for i in range(n_outputs)])
    for i, o in enumerate(outs):
        call("use", (o, "w"), (f"u{i}",), 100 + i, [4000])
    for i in range(n_outputs):
        call("use_backward", (f"u{i}", outs[(i * 7) % n_outputs]), (f"g{i}",), 50, [2000])
        add(Release, f"u{i}")
        add(Release, f"g{i}")
    for o in outs:
        add(Release, o)
    return program_of(ins, f"wide-{n_outputs}")


@pytest.mark.parametrize("n_outputs", [MAX_OUTPUTS + 1, 100])
def test_past_the_limit_the_default_engine_is_python(n_outputs):
    program = wide_program(n_outputs)
    budget = budget_from_ratio(program, 0.5)
    auto = simulate(program, budget, "dtr")
    assert auto.engine == "python"
    assert auto.outcome == "ok" and auto.remat_ns > 0  # the wide operator really is recomputed
    with pytest.raises(UsageError, match="compiled engine is not available"):
        simulate(program, budget, "dtr", engine="c")


@needs_compiled
@pytest.mark.parametrize("ratio", [0.3, 0.5, 0.8])
def test_at_the_limit_both_engines_agree(ratio):
    program = wide_program(MAX_OUTPUTS)
    budget = budget_from_ratio(program, ratio)
    c = simulate(program, budget, "dtr", engine="c").to_dict()
    py = simulate(program, budget, "dtr", engine="python").to_dict()
    assert (c.pop("engine"), py.pop("engine")) == ("c", "python")
    assert c == py and c["remat_ns"] > 0
