"""`dtrlab run --check`: each live step against a plain step from the same state, bitwise, said in
the table and the JSON; and what `--compare-sim` compares, said (not compared on the measured clock)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from conftest import cli_invoke  # noqa: E402
from dtrlab.live import check  # noqa: E402
from dtrlab.live.session import LiveSession  # noqa: E402
from live_helpers import deterministic_torch  # noqa: E402,F401 (an autouse fixture)

SCRIPT = '''
import torch


def make(batch=16, **_):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    x, y = torch.randn(batch, 8), torch.randn(batch, 4)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    return step
'''


def _script(tmp_path):
    path = tmp_path / "bn_sgd.py"
    path.write_text(SCRIPT)
    return path


def test_the_state_a_check_compares_is_what_the_step_changes(tmp_path):
    """find_state reaches the model, the optimizer and the inputs through the step's closure; read
    names every parameter, gradient, buffer and optimizer state tensor."""
    namespace: dict = {}
    exec(compile(SCRIPT, str(_script(tmp_path)), "exec"), namespace)
    step = namespace["make"]()
    step()
    state = check.find_state(step)
    assert (len(state.modules), len(state.optimizers), len(state.tensors)) == (1, 1, 2)
    names = check.read(state)
    assert {"0.weight", "0.weight.grad", "1.running_mean", "1.num_batches_tracked",
            "optimizer0.5.bias.momentum_buffer", "optimizer0.group0.lr", "tensor0"} <= names.keys()


@pytest.mark.parametrize("ratio", ["2.0", "0.9"])
def test_run_check_is_bitwise_equal_to_a_plain_step_and_says_so(ratio, tmp_path):
    """With BatchNorm and SGD with momentum, at a roomy budget and one that evicts: every compared
    value equal, in the JSON and in the table's row and line."""
    argv = ["run", "--script", f"{_script(tmp_path)}:make", "--ratio", ratio, "--check", "--threads", "1",
            "--steps", "2"]
    code, out, _ = cli_invoke(*argv, "--json")
    assert code in (0, None)
    got = json.loads(out)
    assert got["check"] is True
    for live in got["steps"]:
        if live["outcome"] == "ok":
            assert live["check"]["equal"] and live["check"]["compared"] > 20 and live["check"]["differing"] == []
        else:
            assert live["check"] is None
    code, out, _ = cli_invoke(*argv)
    text = " ".join(out.split())
    assert "check: a plain step, bitwise" in text
    if got["steps"][0]["outcome"] == "ok":
        assert "step 1: --check: gradients, parameters, buffers and optimizer state" in text
        assert "bitwise equal to a plain step's from the same state" in text


def test_run_check_finds_a_live_step_that_differs(tmp_path, monkeypatch):
    """The check can fail: a live step that does not give the constants it wrote their new bytes
    (the optimizer's updates, batch norm's statistics) differs from the plain step there."""
    monkeypatch.setattr(LiveSession, "_finish", lambda self: self._finish_planned())
    code, out, _ = cli_invoke("run", "--script", f"{_script(tmp_path)}:make", "--ratio", "2.0", "--check",
                              "--threads", "1", "--json")
    assert code in (0, None)
    (live,) = json.loads(out)["steps"]
    differing = set(live["check"]["differing"])
    assert not live["check"]["equal"]
    assert {"0.weight", "1.running_mean", "optimizer0.0.weight.momentum_buffer"} <= differing
    assert "0.weight.grad" not in differing  # the gradients are the step's own results: equal


def test_the_measured_clock_says_decisions_are_not_compared(tmp_path):
    """On the measured clock each run costs its own time: the verdict says decisions are not compared
    there (it said they differ), and the JSON's same_decisions is null."""
    argv = ["run", "--script", f"{_script(tmp_path)}:make", "--ratio", "0.9", "--compare-sim", "--clock", "measured",
            "--threads", "1"]
    code, out, _ = cli_invoke(*argv)
    assert code in (0, None)
    text = " ".join(out.split())
    assert "step 1: decisions are not compared on the measured clock" in text and "differ" not in text
    code, out, _ = cli_invoke(*argv, "--json")
    assert json.loads(out)["same_decisions"] == [None]


def test_same_decisions_compares_eager_evictions_and_the_peak_too():
    """An out-of-memory stop once showed 63 eager evictions live against 62 simulated under a "same
    decisions" verdict: the verdict compared only the outcome, the evictions, the
    rematerializations and a finished run's clock. Now every figure of DECISION_FIGURES counts:
    a real run and its simulation agree, and one figure changed is named."""
    from dataclasses import replace

    from dtrlab.capture.recorder import record
    from dtrlab.live.runs import decision_differences, live_step, same_decisions, simulate_plan
    from dtrlab.live.session import make_plan
    from dtrlab.sim.simulate import baseline

    namespace: dict = {}
    exec(compile(SCRIPT, "bn_sgd.py", "exec"), namespace)
    step = namespace["make"]()
    step()
    plan = make_plan(record(step).instructions)
    budget = int(baseline(plan.program).peak_bytes * 0.5)
    live = live_step(step, budget, "dtr", "logical", 0, "cpu", plan)
    sim = simulate_plan(plan.program, budget, "dtr", 0)
    assert live.evictions > 0 and same_decisions(live, sim)
    for figure in ("eager_evictions", "peak_bytes", "clock_ns"):
        other = replace(sim, **{figure: getattr(sim, figure) + 1})
        assert decision_differences(live, other) == [figure] and not same_decisions(live, other)
