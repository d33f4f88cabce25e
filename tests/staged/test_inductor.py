"""The inductor way of running a staged graph (staged/inductor.py) against plain PyTorch: a step's losses,
parameters, buffers, gradients and optimizer state within GRAD_TOLERANCE of the eager step's over
steps, dropout's numbers replayed; its peak counted by the CPU allocator, beside the GraphModule's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import dtrlab  # noqa: E402
from dtrlab.errors import UsageError  # noqa: E402
from dtrlab.staged.inductor import GRAD_TOLERANCE, max_relative_difference  # noqa: E402
from dtrlab.staged.measure import allocator_peak_bytes  # noqa: E402

from test_stage import mlp_world, snapshot  # noqa: E402


def _staged_pair(ratio: float, dropout: bool):
    """The test MLP with SGD (momentum) eager, and staged at `ratio` (unit costs: the plan the graph's
    and the budget's alone) on inductor; four steps of each from one seed: the staged step, the losses,
    and the pair's state."""
    plain, pm, po = mlp_world(optimizer="sgd", dropout=dropout)
    step, sm, so = mlp_world(optimizer="sgd", dropout=dropout)
    torch.manual_seed(7)
    staged = dtrlab.stage(step, ratio=ratio, costs="unit", backend="inductor")
    torch.manual_seed(7)
    plain_losses = [plain().detach() for _ in range(4)]
    torch.manual_seed(7)
    staged_losses = [staged() for _ in range(4)]  # plan, plan again (the momentum), then compiled twice
    return staged, plain_losses, staged_losses, snapshot(pm, po), snapshot(sm, so)


def test_max_relative_difference_is_over_the_largest_magnitude():
    a = [torch.tensor([1.0, -4.0]), torch.tensor([2.0])]
    assert max_relative_difference(a, [t.clone() for t in a]) == 0.0
    assert max_relative_difference(a, [torch.tensor([1.0, -4.0]), torch.tensor([2.5])]) == pytest.approx(0.5 / 4)
    assert max_relative_difference(a, a[:1]) == float("inf")
    assert max_relative_difference(a, [torch.zeros(3), a[1]]) == float("inf")


def test_an_unknown_backend_is_one_line():
    step, _, _ = mlp_world(optimizer="sgd")
    with pytest.raises(UsageError, match="backend must be one of graph, inductor"):
        dtrlab.stage(step, backend="tvm")


@pytest.mark.slow
def test_inductor_staged_mlp_with_dropout_is_close_to_eager():
    # Unbounded: dropout runs once, through ATen's kernels inside the compiled graph (the eager numbers).
    staged, plain_losses, staged_losses, want, got = _staged_pair(1.0, dropout=True)
    assert staged.compiled and staged._runners[id(staged.plan)].compiled_from is staged.plan.module
    assert max_relative_difference(want, got) <= GRAD_TOLERANCE
    # a dropout mask drawn afresh would put the losses far apart, not within the tolerance
    assert max_relative_difference(plain_losses, staged_losses) <= GRAD_TOLERANCE
    _, peak = staged.measured()
    assert peak.kind == "allocator" and peak.peak_bytes > 0


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0.7, 0.5])
def test_a_plan_replaying_dropout_compiles_whole_with_the_eager_numbers_within_the_budget(ratio):
    # Every random operator explicit (inductor.explicit_rng): no graph break, the masks the eager step
    # draws (a fresh mask would put the losses far apart), and the allocator's peak within the budget.
    from torch._dynamo.utils import counters

    breaks = sum(counters["graph_break"].values())
    staged, plain_losses, staged_losses, want, got = _staged_pair(ratio, dropout=True)
    p = staged.plan
    assert p.replay.n_recompute > 0 and staged.compiled
    assert any(getattr(n.target, "__name__", "").startswith("replay_rng") for n in p.module.graph.nodes)
    assert sum(counters["graph_break"].values()) == breaks
    assert max_relative_difference(plain_losses, staged_losses) <= GRAD_TOLERANCE
    assert max_relative_difference(want, got) <= GRAD_TOLERANCE
    _, peak = staged.measured()
    assert peak.kind == "allocator" and 0 < peak.peak_bytes <= p.budget_bytes
    # (the generator left where the eager step leaves it: each step's masks follow the last step's draws,
    # so four steps within the tolerance say so)


@pytest.mark.slow
def test_inductor_staged_mlp_without_random_recomputation_keeps_the_budget():
    # No random operator: one compiled graph, no break, whose peak the allocator counts within the
    # budget; the same count of the GraphModule's run is within it too (the count is not inductor's alone).
    staged, _, _, want, got = _staged_pair(0.8, dropout=False)
    p = staged.plan
    assert p.replay.n_recompute > 0 and staged.compiled
    assert max_relative_difference(want, got) <= GRAD_TOLERANCE
    _, peak = staged.measured()
    assert peak.kind == "allocator" and 0 < peak.peak_bytes <= p.budget_bytes
    _, _, inputs = staged._prepared(())
    with torch.no_grad():
        assert allocator_peak_bytes(lambda: p.module(*inputs), inputs) <= p.budget_bytes
