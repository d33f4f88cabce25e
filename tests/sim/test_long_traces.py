"""A captured LSTM over a long sequence (its unbind has one output per time step, 256 here) on the
compiled engine: counter for counter the Python engine's (seq 256 at a ratio with evictions, seq 80 at
three ratios down to a thrash)."""

from __future__ import annotations

import pytest

from conftest import needs_compiled
from dtrlab.sim.simulate import budget_from_ratio, simulate

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.save import to_program  # noqa: E402
from dtrlab.capture.zoo import lstm  # noqa: E402


def captured_lstm(seq: int):
    """`dtrlab capture lstm --size seq=SEQ --size hidden=64 --size input_size=32 --batch 4`, in-process."""
    torch.manual_seed(0)
    return to_program(record(lstm(batch=4, input_size=32, hidden=64, seq=seq)), f"lstm-seq{seq}")


def assert_engines_agree(program, ratio, overhead_limit=None):
    budget = budget_from_ratio(program, ratio)
    c = simulate(program, budget, "dtr", engine="c", overhead_limit=overhead_limit).to_dict()
    py = simulate(program, budget, "dtr", engine="python", overhead_limit=overhead_limit).to_dict()
    assert (c.pop("engine"), py.pop("engine")) == ("c", "python")
    assert c == py, ratio
    return c


@pytest.mark.slow
@needs_compiled
def test_a_seq_256_lstm_runs_compiled_and_equals_the_python_engine():
    program = captured_lstm(256)
    assert int(program.op_n_out.max()) >= 256  # the unbind of the sequence
    unbounded = simulate(program, budget_from_ratio(program, 1.0), "dtr")
    assert unbounded.engine == "c" and unbounded.evictions == 0
    # the Python engine needs about 10 s for the whole step here and about 1 s an eviction (a pool
    # scan of ~1,000 e* scores): one ratio with a few evictions compares the whole run (0.999: 4)
    run = assert_engines_agree(program, 0.999)
    assert run["evictions"] > 0 and run["outcome"] == "ok"


@pytest.mark.slow
@needs_compiled
def test_a_seq_80_lstm_equals_the_python_engine_down_to_thrashing():
    program = captured_lstm(80)  # past the 64 outputs the compiled engine once stopped at
    assert int(program.op_n_out.max()) >= 80
    # down to a thrash, stopped by the overhead limit (the Python engine would take hours)
    runs = [assert_engines_agree(program, ratio, overhead_limit=1.5) for ratio in (0.9, 0.8, 0.5)]
    assert 0 < runs[0]["evictions"] < runs[1]["evictions"]
    assert runs[2]["outcome"] in ("remat_limit", "oom") and runs[2]["evictions"] > 0
