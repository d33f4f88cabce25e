"""A write in place through a view of a tensor that needs gradients, then the tensor used: the live
step follows its own capture (autograd replays the view's operator alike under both), decides as
the simulation of that capture, and its gradients are plain PyTorch's, bitwise."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.live.runs import live_step, same_decisions, simulate_plan  # noqa: E402
from dtrlab.live.session import LiveTensor, make_plan  # noqa: E402
from dtrlab.sim.simulate import baseline  # noqa: E402
from live_helpers import deterministic_torch, same_bits  # noqa: E402,F401 (an autouse fixture)

WRITES = {
    "narrow": lambda x: x.narrow(1, 0, 8).mul_(3),
    "slice": lambda x: x[:, :8].add_(1),
    "t": lambda x: x.t().mul_(2),
    "view": lambda x: x.view(-1).add_(1),
    "select": lambda x: x.select(0, 1).mul_(5),
}


def _step(kind: str):
    """A chain whose middle tensor is written through a view, then read by what follows."""
    torch.manual_seed(0)
    w = torch.randn(16, 32, requires_grad=True)

    def step():
        w.grad = None
        x = w * 1.5
        WRITES[kind](x)
        y = (x * 2).sin()
        z = y.cos() * x
        z.tanh().sum().backward()

    step.w = w
    return step


@pytest.mark.parametrize("engine", ["c", "python"])
@pytest.mark.parametrize("kind", sorted(WRITES))
def test_a_write_through_a_view_runs_live_as_simulated_and_bitwise(kind, engine):
    step = _step(kind)
    plain = _step(kind)
    plain()
    plan = make_plan(record(step).instructions)
    peak = baseline(plan.program).peak_bytes
    evicted = 0
    for ratio in (None, 1.0, 0.8, 0.6):
        budget = 2**62 if ratio is None else int(peak * ratio)
        live = live_step(step, budget, "dtr", "logical", 0, "cpu", plan, engine=engine)
        sim = simulate_plan(plan.program, budget, "dtr", 0)
        assert same_decisions(live, sim) and live.peak_bytes == sim.peak_bytes, (ratio, live, sim)
        if live.outcome == "ok":
            grad = step.w.grad  # the live step's: a LiveTensor of its session
            assert isinstance(grad, LiveTensor) and same_bits(grad._session.value(grad), plain.w.grad), ratio
        evicted += live.evictions
    assert evicted > 0  # the budgets bite
