"""DTR's choice as the partitioner's knapsack (compare/partitioned.py): PyTorch's partitioner saves the
candidates DTR keeps and recomputes those DTR recomputes, the gradients stay plain PyTorch's, and a ratio
DTR cannot fit says so in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch._functorch import config as functorch_config  # noqa: E402
from torch._functorch.aot_autograd import aot_function, make_boxed_func  # noqa: E402
from torch._functorch.partitioners import min_cut_rematerialization_partition  # noqa: E402

from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.compare import Mode, prepare  # noqa: E402
from dtrlab.compare.partitioned import KNAPSACK_BUDGET, DtrKnapsack  # noqa: E402
from dtrlab.compare.world import grads_of, zoo_step  # noqa: E402
from dtrlab.staged.inductor import GRAD_TOLERANCE, max_relative_difference  # noqa: E402
from dtrlab.staged.staging import StagingOutOfMemory  # noqa: E402


def mlp(depth: int, width: int, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.LayerNorm(width),
                                                     torch.nn.GELU()) for _ in range(depth)])


def as_is(gm, _inputs):
    return make_boxed_func(gm)


def partitioned(model: torch.nn.Module, x: torch.Tensor, ratio: float):
    """One forward and backward of `model` through AOT autograd's partitioner with DtrKnapsack at
    `ratio` (the graphs run as ATen code, no inductor): the gradients, the names of the values the
    forward saves, and the solver."""
    names = [n for n, _ in model.named_parameters()]
    params = list(model.parameters())

    def loss(x, *ps):
        return torch.func.functional_call(model, dict(zip(names, ps)), (x,)).square().sum()

    saved: list[str] = []

    def partition(joint, inputs, *, num_fwd_outputs, **kw):
        fw, bw = min_cut_rematerialization_partition(joint, inputs, num_fwd_outputs=num_fwd_outputs, **kw)
        saved.extend(n.name for n in list(fw.graph.nodes)[-1].args[0][num_fwd_outputs:])
        return fw, bw

    solver = DtrKnapsack(ratio, costs="unit")  # decisions that do not hang on the machine's clock
    with functorch_config.patch(activation_memory_budget=KNAPSACK_BUDGET, activation_memory_budget_solver=solver):
        step = aot_function(loss, as_is, as_is, partition_fn=partition)
        grads = torch.autograd.grad(step(x, *params), params)
    want = torch.autograd.grad(loss(x, *params), params)
    assert all(torch.equal(a, b) for a, b in zip(want, grads)), ratio
    return set(saved), solver


@pytest.mark.parametrize("depth,width,batch", [(4, 32, 64), (6, 48, 128)])
def test_the_partitioner_recomputes_what_dtr_recomputes_and_saves_the_rest(depth, width, batch):
    model, x = mlp(depth, width), torch.randn(batch, width)
    recomputed_at = {}
    for ratio in (1.0, 0.95, 0.9, 0.85, 0.8, 0.7):
        try:
            saved, solver = partitioned(model, x, ratio)
        except StagingOutOfMemory:  # a ratio DTR cannot fit ends the sweep (below)
            break
        (decision,) = solver.decisions
        assert decision.candidates >= depth  # each block's matmul at least
        recomputed = set(decision.recomputed)
        assert not recomputed & saved  # PyTorch saves none of what DTR recomputes
        recomputed_at[ratio] = recomputed
    assert recomputed_at[1.0] == set()  # unbounded: DTR keeps everything
    assert any(recomputed_at[r] for r in recomputed_at if r < 1.0)  # and below, it recomputes some


def test_the_candidates_dtr_keeps_are_saved():
    model, x = mlp(4, 32), torch.randn(64, 32)
    saved, solver = partitioned(model, x, 0.9)
    (decision,) = solver.decisions
    assert decision.recomputed  # something to tell apart
    # every matmul DTR keeps is among the forward's saved values (each is needed by its norm's backward)
    kept = {f"addmm_{i}" if i else "addmm" for i in range(4)} - set(decision.recomputed)
    assert kept and kept <= saved


def test_a_ratio_dtr_cannot_fit_is_one_line_not_a_partition():
    with pytest.raises(StagingOutOfMemory, match="DTR does not fit the partitioner's joint graph in [0-9,]+ B"):
        partitioned(mlp(4, 32), torch.randn(64, 32), 0.05)


@pytest.mark.slow
def test_a_compiled_step_with_dtrs_knapsack_gives_plain_pytorchs_gradients_within_tolerance():
    sizes = dict(ZOO["transformer"].tiny, layers=2)
    torch.manual_seed(0)
    plain = ZOO["transformer"].make(**sizes)
    plain()
    want = [p.grad for p in plain.model.parameters()]
    world = zoo_step("transformer", sizes)
    runner = prepare(Mode("compile-dtr", 1.0), world)
    runner.step()
    assert max_relative_difference(want, grads_of(world)) <= GRAD_TOLERANCE
    assert runner.peak_kind == "allocator" and runner.peak_bytes() > 0
    assert runner.detail().startswith("DTR recomputes 0 of ")
