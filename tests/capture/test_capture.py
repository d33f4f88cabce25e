"""Capture: a recorded step reads, lowers and simulates, and its peak agrees with the recorder's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.recorder import record, record_median  # noqa: E402
from dtrlab.capture.peakgap import peak_gap  # noqa: E402
from dtrlab.capture.save import save, to_program, to_text  # noqa: E402
from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.sim.simulate import baseline, simulate  # noqa: E402
from dtrlab.trace import load  # noqa: E402
from dtrlab.trace.read import Mutate  # noqa: E402


def _mlp_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                                torch.nn.Tanh(), torch.nn.Linear(16, 3))
    x = torch.randn(4, 6)

    def step():
        model.zero_grad(set_to_none=True)
        model(x).square().mean().backward()

    return step


def test_tiny_model_reads_back_and_peaks_agree(tmp_path):
    step = _mlp_step()
    step()
    capture = record(step)
    # No in-place operator: the trace's memory model and the real storages must agree exactly.
    assert not any(isinstance(i, Mutate) for i in capture.instructions)
    assert capture.unattributed_aliases == 0
    path = tmp_path / "mlp.log.gz"
    save(capture, path)
    (program,) = load(path, cache=False)  # the file goes through the reader's validation
    assert "BACKWARD" in program.meta["annotations"]
    assert program.n_ops == capture.operators + program.op_constant.sum()
    assert baseline(program).peak_bytes == capture.peak_bytes
    result = simulate(program, None)
    assert result.outcome == "ok" and result.evictions == 0 and result.remat_ns == 0
    assert result.peak_bytes == capture.peak_bytes


def test_median_of_repeats_keeps_the_operators():
    step = _mlp_step()
    once = record(step)
    median = record_median(step, repeat=3, warmup=1)
    assert median.op_names == once.op_names
    assert median.peak_bytes == once.peak_bytes


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_captures_at_a_tiny_size(name):
    model = ZOO[name]
    step = model.make(**model.tiny)
    step()
    capture = record(step)
    program = to_program(capture, name)
    peak = baseline(program).peak_bytes
    # Each MUTATE is a fresh copy in the trace's model: it may add its storage's bytes, no more.
    assert capture.peak_bytes <= peak <= capture.peak_bytes + capture.mutated_bytes
    if capture.mutated_bytes == 0:
        assert peak == capture.peak_bytes
    # The whole gap is MUTATE's copy: written in place, the trace peaks exactly where the recorder did.
    gap = peak_gap(to_text(capture, name), capture.peak_bytes)
    assert gap.simulated_peak_bytes == peak
    assert gap.in_place_peak_bytes == capture.peak_bytes
    result = simulate(program, None)
    assert result.outcome == "ok" and result.evictions == 0
    # Under the peak something must go: the readable Python engine, the compiled one's oracle, gives
    # the same outcome, clock and evictions, and a run that finishes stays within its budget.
    budget_bytes = int(peak * 0.8)
    tight = simulate(program, budget_bytes)
    oracle = simulate(program, budget_bytes, engine="python")
    assert (tight.outcome, tight.clock_ns, tight.evictions) == (oracle.outcome, oracle.clock_ns, oracle.evictions)
    if tight.outcome == "ok":
        assert tight.evictions > 0 and tight.peak_bytes <= budget_bytes
    else:
        assert tight.outcome == "oom", tight.outcome  # no overhead limit was set: only memory can stop it


def test_a_write_through_a_view_moves_the_storage_s_other_tensors_to_the_new_version():
    """An LSTM cell's gates: one storage, four views, each activated in place. PyTorch's views all
    see every write; the trace's MUTATE makes a new version for the written name only, so each of
    the other names on the storage is moved to it (a REBIND_OP call, an alias of the written name)
    and released on the old version, which then has no name left: the trace holds one copy of the
    gates at a time, not one per write."""
    from dtrlab.capture.naming import REBIND_OP
    from dtrlab.trace.read import Call, Release

    x = torch.randn(2, 32)

    def step():
        gates = x * 2
        i, f, g, o = gates.chunk(4, 1)
        i.sigmoid_()
        f.sigmoid_()
        g.tanh_()
        o.sigmoid_()
        return (f * g + i) * o

    capture = record(step)
    ins = capture.instructions
    writes = [k for k, x in enumerate(ins) if isinstance(x, Mutate)]
    assert len(writes) == 4
    for k in writes:  # gates and the three other chunks move to each new version
        rebinds = [x for x in ins[k + 1:k + 1 + 4 * 4] if isinstance(x, Call) and x.name == REBIND_OP]
        assert len(rebinds) == 4 and all(r.args == (ins[k].args[0],) for r in rebinds)
    moved = {x.name for k in writes for x in ins[k + 1:k + 1 + 4 * 4] if isinstance(x, Release)}
    assert len(moved) == 4 * 4  # each move releases its old name
    program = to_program(capture)
    gates_bytes = 2 * 32 * 4
    # Unbounded, at most the old and the new version of the gates are live at once: the recorder's
    # peak plus one copy, where a MUTATE per write without the moves would keep four old versions.
    assert baseline(program).peak_bytes <= capture.peak_bytes + gates_bytes
    assert simulate(program, None, "dtr", "eager-optimized").outcome == "ok"
