"""dtrlab.stage against plain PyTorch: a staged step's parameters, gradients, buffers, optimizer state
and loss bitwise equal to the eager step's from the same state; the rewrite runs the schedule's
computations in its order; the real peak, counted by storage identity, within the model's and the budget."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import dtrlab  # noqa: E402
from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.defaults import DEFAULT_RUNTIME  # noqa: E402
from dtrlab.optimal.least import dtr_least_bytes  # noqa: E402
from dtrlab.schedule.format import COMPUTE  # noqa: E402
from dtrlab.sim.simulate import baseline, simulate  # noqa: E402
from dtrlab.staged import NotStageable, StagingOutOfMemory  # noqa: E402


def mlp_world(seed: int = 0, optimizer: str = "adam", dropout: bool = True):
    """A user-style step: an MLP with batch norm and dropout (unless not `dropout`), MSE, Adam (or SGD
    with momentum); activations fill most of the peak, so low ratios leave room to recompute."""
    torch.manual_seed(seed)
    drop = nn.Dropout if dropout else (lambda p: nn.Identity())
    layers = [nn.Linear(16, 64), nn.BatchNorm1d(64), nn.ReLU(), drop(0.3)]
    for _ in range(4):
        layers += [nn.Linear(64, 64), nn.Tanh(), drop(0.2)]
    model = nn.Sequential(*layers, nn.Linear(64, 4))
    opt = (torch.optim.Adam(model.parameters(), lr=1e-2) if optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    return mse_step(model, opt, torch.randn(1024, 16), torch.randn(1024, 4)), model, opt


def mse_step(model, opt, x, y):
    """A user's training step: gradients set to none, MSE of model(x) against y, backward, update."""
    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def snapshot(model, opt) -> list:
    params = list(model.parameters())
    return ([p.detach().clone() for p in params] + [b.clone() for b in model.buffers()]
            + [p.grad for p in params] + [v for p in params for _, v in sorted(opt.state[p].items())])


def assert_bitwise(a: list, b: list) -> None:
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        assert u.dtype == v.dtype and u.shape == v.shape and torch.equal(u, v), f"tensor {i} differs"
        # the staged graph runs without autograd recording it (which would also keep what it saves alive)
        assert u.requires_grad == v.requires_grad, f"tensor {i}: requires_grad differs"


@pytest.mark.slow
@pytest.mark.parametrize("ratio,costs", [(1.0, "measured"), (0.7, "unit"), (0.5, "unit")])
def test_mlp_adam_staged_is_bitwise_the_eager_step(ratio, costs):
    # Below 1, unit costs: measured ones make the decisions (and whether 0.5 fits) the machine's timing's.
    plain, pm, po = mlp_world()
    step, sm, so = mlp_world()
    torch.manual_seed(7)
    staged = dtrlab.stage(step, ratio=ratio, costs=costs)
    torch.manual_seed(7)
    plain_losses = [plain() for _ in range(3)]
    torch.manual_seed(7)
    staged_losses = [staged() for _ in range(3)]
    assert_bitwise([x.detach() for x in plain_losses], staged_losses)
    assert_bitwise(snapshot(pm, po), snapshot(sm, so))
    # Adam makes its state in the first step: one more plan, then the same graph for every later step.
    assert len(staged.plans) == 2
    p = staged.plan
    if ratio < 1:
        assert p.replay.n_recompute > 0
    if ratio <= 0.5:
        # dropout's masks are recomputed, each from its first computation's generator state
        assert any(str(n.target).startswith("<function replay_rng") or getattr(n.target, "__name__", "").startswith(
            "replay_rng") for n in p.module.graph.nodes)


@pytest.mark.slow
def test_the_measured_peak_is_within_the_model_and_the_budget():
    step, model, opt = mlp_world()
    staged = dtrlab.stage(step, ratio=0.5, costs="unit")
    staged()  # the second plan, with Adam's state
    for _ in range(2):
        _, measured = staged.measured()
        p = staged.plan
        assert measured.peak_bytes - measured.rng_bytes <= p.replay.peak_bytes <= p.budget_bytes
        assert p.replay.peak_bytes == p.result.peak_bytes


def test_the_rewritten_graph_runs_the_schedules_computations_in_its_order():
    step, model, opt = mlp_world(optimizer="sgd")
    staged = dtrlab.stage(step, ratio=0.5, costs="unit")
    p = staged.plan
    constant = p.program.op_constant
    expected = [x for k, x in zip(p.schedule.kind.tolist(), p.schedule.target.tolist())
                if k == COMPUTE and not constant[x]]
    ran = [n.meta["dtrlab_op"] for n in p.module.graph.nodes if "dtrlab_op" in n.meta]
    assert ran == expected
    assert len(ran) - len(set(ran)) == p.replay.n_recompute > 0


def test_a_budget_the_simulation_cannot_meet_is_one_line():
    step, model, opt = mlp_world()
    before = [t.clone() for t in model.parameters()]
    with pytest.raises(StagingOutOfMemory) as err:
        dtrlab.stage(step, ratio=0.05, costs="unit")
    assert "\n" not in str(err.value) and "does not fit" in str(err.value)
    assert_bitwise(before, list(model.parameters()))


def test_a_step_whose_branch_reads_a_tensor_is_refused_in_one_line():
    step, model, opt = mlp_world()
    x = torch.randn(8, 16)

    def branching():
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = out.sum() if out.mean().item() > 0 else -out.sum()
        loss.backward()
        opt.step()
    branching.model, branching.optimizer = model, opt
    before = [t.clone() for t in model.parameters()]
    with pytest.raises(NotStageable) as err:
        dtrlab.stage(branching)
    assert "\n" not in str(err.value) and "live runtime" in str(err.value)
    assert_bitwise(before, list(model.parameters()))
    assert all(p.grad is None for p in model.parameters())


# Sizes at which activations, not parameters and optimizer state, fill each zoo model's staged peak:
# `small` with a larger batch (or sequence), so budgets well below the peak fit.
STAGED_SIZES = {"resnet32": dict(batch=16, image=16), "lstm": dict(batch=16, seq=6), "transformer": dict(batch=16, seq=32),
                "unet": {}, "densenet": dict(batch=8)}
SHARES = (0.0, 0.25, 0.5, 0.75)  # budgets: DTR's least plus these shares of the rest to the peak; and unbounded
STEPS = 2  # the first plans without the optimizer's state, the second with it (a second plan)


def zoo_world(name: str, seed: int = 0):
    """A zoo model's step at its STAGED_SIZES with SGD (momentum 0.9) after the backward."""
    torch.manual_seed(seed)
    step = ZOO[name].make(**{**ZOO[name].small, **STAGED_SIZES[name]})
    opt = torch.optim.SGD(step.model.parameters(), lr=0.1, momentum=0.9)

    def full():
        step()
        opt.step()
    full.model, full.optimizer = step.model, opt
    return full, step.model, opt


def budgets(programs: list) -> list[int]:
    """SHARES of the way from the least budget at which DTR fits every one of `programs` (the plans of
    one step: the first, and the one every later step runs, with the optimizer's state) to the largest
    unconstrained peak; each moved up to the next budget at which every plan fits (DTR's feasibility is
    not monotone)."""
    peak = max(baseline(p).peak_bytes for p in programs)
    least = max(dtr_least_bytes(p, DEFAULT_RUNTIME) for p in programs)  # the runtime stage() simulates

    def fits(budget: int) -> bool:
        return all(simulate(p, budget, "dtr", DEFAULT_RUNTIME).outcome == "ok" for p in programs)

    out = []
    for share in SHARES:
        budget = int(least + share * (peak - least))
        while not fits(budget):
            budget += max(1, peak // 1000)
        out.append(budget)
    return out


def assert_staged_bitwise_at_budgets(make_world) -> list[int]:
    """Staged unbounded, then at each of budgets() of its plans, STEPS steps give bitwise the eager
    steps' losses (when the step returns one), parameters, buffers, gradients and optimizer state, with
    the storage count's peak within the simulated one and the budget, and equal to it unbounded. Unit
    costs: measured ones make the decisions the machine's. Returns each budget's recomputations, least
    budget first (above 0) and unbounded last (0)."""
    plain, pm, po = make_world()
    torch.manual_seed(11)
    plain_out = [plain() for _ in range(STEPS)]
    expected = snapshot(pm, po)

    def staged_at(budget: int | None):
        step, sm, so = make_world()
        staged = dtrlab.stage(step, budget_bytes=budget, costs="unit")
        torch.manual_seed(11)  # staging's own draws are not the step's
        out = [staged() for _ in range(STEPS)]
        if plain_out[0] is not None:
            assert_bitwise([x.detach() for x in plain_out], out)
        assert_bitwise(expected, snapshot(sm, so))
        _, measured = staged.measured()
        p = staged.plan
        real = measured.peak_bytes - measured.rng_bytes
        assert real <= p.replay.peak_bytes and (budget is None or p.replay.peak_bytes <= budget)
        return staged, real

    unbounded, real = staged_at(None)
    p = unbounded.plan
    # Unbounded, nothing is evicted and the simulation frees what the graph frees: the peaks are one.
    # (Below, the simulation keeps a released value until it evicts it, the graph drops it at once.)
    assert real == p.replay.peak_bytes and p.replay.n_recompute == 0
    recomputed = [staged_at(b)[0].plan.replay.n_recompute for b in budgets([q.program for q in unbounded.plans])]
    assert recomputed[0] > 0, recomputed
    return recomputed + [0]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_models_with_sgd_momentum_staged_are_bitwise_the_eager_step_at_five_budgets(name):
    assert_staged_bitwise_at_budgets(lambda: zoo_world(name))


@pytest.mark.slow
def test_a_step_that_updates_nothing_in_place_is_bitwise_the_eager_step():
    # The zoo's LSTM step as `dtrlab run` runs it: forward and backward, no optimizer, no buffers; its
    # graph's only outputs are new gradients (the first plan) and gradients written into (the second).
    def world():
        torch.manual_seed(0)
        return ZOO["lstm"].make(**ZOO["lstm"].tiny)
    plain, step = world(), world()
    staged = dtrlab.stage(step, costs="unit")
    for _ in range(3):
        plain()
        staged()
    assert not list(step.model.buffers())
    assert_bitwise([p.grad for p in plain.model.parameters()], [p.grad for p in step.model.parameters()])
    assert len(staged.plans) == 2


def test_the_package_s_stage_is_the_function():
    from dtrlab.staged import stage
    assert stage is dtrlab.stage and callable(stage) and stage.__name__ == "stage"


def scheduled_world(seed: int = 0):
    """An SGD step (momentum) with a OneCycle learning-rate schedule, on a small MLP."""
    step, model, opt = mlp_world(seed, optimizer="sgd")
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=100)
    return step, model, opt, sched


def test_a_scheduler_stepped_inside_the_step_is_refused_and_put_back():
    """The graph would hold the trace's learning rate at every step (silently wrong): refused in one
    line, with the optimizer's settings and the scheduler as they were."""
    step, model, opt, sched = scheduled_world()

    def inside():
        loss = step()
        sched.step()
        return loss
    before = (dict((k, v) for k, v in opt.param_groups[0].items() if k != "params"), sched.state_dict())
    params = [t.clone() for t in model.parameters()]
    with pytest.raises(NotStageable) as err:
        dtrlab.stage(inside, modules=[model], optimizers=[opt], costs="unit")
    line = str(err.value)
    assert "\n" not in line and len(line) <= 200 and "lr" in line and "outside the staged step" in line
    assert {k: v for k, v in opt.param_groups[0].items() if k != "params"} == before[0]
    assert sched.state_dict() == before[1]
    assert_bitwise(params, list(model.parameters()))


@pytest.mark.slow
def test_a_scheduler_stepped_outside_the_staged_step_is_bitwise_eager_over_steps():
    """The workaround the refusal names: each new rate is a new graph (planned again), each bitwise."""
    plain, pm, po, psched = scheduled_world()
    step, sm, so, ssched = scheduled_world()
    staged = dtrlab.stage(step, costs="unit")
    torch.manual_seed(7)
    plain_losses = []
    for _ in range(3):
        plain_losses.append(plain().detach())
        psched.step()
    torch.manual_seed(7)
    staged_losses = []
    for _ in range(3):
        staged_losses.append(staged())
        ssched.step()
    assert_bitwise(plain_losses, staged_losses)
    assert_bitwise(snapshot(pm, po), snapshot(sm, so))
    assert po.param_groups[0]["lr"] == so.param_groups[0]["lr"]
    assert len({p.graph.key for p in staged.plans}) == len(staged.plans) >= 3  # one graph per rate


def test_a_number_read_out_for_a_log_is_refused():
    """`.item()` kept outside the graph would be read once, at the trace: refused in one line."""
    step, model, opt = mlp_world(optimizer="sgd")
    log = []

    def logging():
        loss = step()
        log.append(loss.item())
    params = [t.clone() for t in model.parameters()]
    with pytest.raises(NotStageable) as err:
        dtrlab.stage(logging, modules=[model], optimizers=[opt], costs="unit")
    assert "\n" not in str(err.value) and ".item()" in str(err.value) and "return the tensor" in str(err.value)
    assert str(err.value).startswith("test_stage.py:")  # the user's line
    assert_bitwise(params, list(model.parameters()))


@pytest.mark.slow
def test_numbers_read_from_returned_tensors_are_bitwise_eager_over_steps():
    """The workaround the refusal names: the step returns the tensors, the loop reads them."""
    def world():
        step, model, opt = mlp_world(optimizer="sgd")

        def returning():
            loss = step()
            return loss, model[0].weight.grad.norm()
        return returning, model, opt
    plain, pm, po = world()
    step, sm, so = world()
    staged = dtrlab.stage(step, costs="unit")
    torch.manual_seed(7)
    plain_log = [x.item() for _ in range(3) for x in plain()]
    torch.manual_seed(7)
    staged_log = [x.item() for _ in range(3) for x in staged()]
    assert plain_log == staged_log and len(staged_log) == 6
    assert_bitwise(snapshot(pm, po), snapshot(sm, so))


def test_a_step_whose_optimizer_is_not_found_is_refused():
    """An optimizer kept where dtrlab does not look (a dict) would update nothing in the graph: refused."""
    step, model, opt = mlp_world(optimizer="sgd")
    held = {"opt": opt}

    def hidden():
        held["opt"].zero_grad(set_to_none=True)
        F.mse_loss(model(torch.ones(8, 16)), torch.zeros(8, 4)).backward()
        held["opt"].step()
    params = [t.clone() for t in model.parameters()]
    with pytest.raises(NotStageable, match=r"optimizer \(SGD\) dtrlab did not find"):
        dtrlab.stage(hidden, costs="unit")
    assert_bitwise(params, list(model.parameters()))
    assert dtrlab.stage(hidden, optimizers=[opt], costs="unit").plan.graph.sinks  # named, it stages


@pytest.mark.slow
def test_the_solver_s_schedule_runs_as_a_staged_step_bitwise_eager():
    """planner="optimal": the schedule dtrlab.optimal finds (checked by the same replay) is compiled
    into the step as DTR's is, and the step is bitwise the eager one over three steps."""
    plain, pm, po = mlp_world(optimizer="sgd")
    step, sm, so = mlp_world(optimizer="sgd")
    staged = dtrlab.stage(step, ratio=0.7, costs="unit", planner="optimal", time_limit_s=5)
    torch.manual_seed(7)
    plain_losses = [plain().detach() for _ in range(3)]
    torch.manual_seed(7)
    staged_losses = [staged() for _ in range(3)]
    assert_bitwise(plain_losses, staged_losses)
    assert_bitwise(snapshot(pm, po), snapshot(sm, so))
    p = staged.plan
    assert p.schedule.made_by.startswith("optimal") and p.replay.n_recompute > 0
    assert p.replay.peak_bytes <= p.budget_bytes
    assert p.result.bound_overhead <= p.replay.overhead + 1e-12


def test_an_unknown_planner_is_one_line():
    step, model, opt = mlp_world()
    from dtrlab.errors import UsageError
    with pytest.raises(UsageError, match="planner must be one of dtr, optimal"):
        dtrlab.stage(step, planner="checkmate")


def _accumulating(model, opt, x, y):
    def step():  # no zero_grad: the backward adds to the gradients it finds
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def test_the_previous_gradients_are_let_go_before_the_staged_graph_runs_and_kept_when_read(monkeypatch):
    """A step that sets its gradients to None before its backward does not read the previous ones:
    the staged graph does not take them, and they are gone (no reference left) before it runs; the
    step stays bitwise the eager one. A step that accumulates reads them: they stay inputs."""
    import weakref

    plain, pm, po = mlp_world(optimizer="sgd")
    step, sm, so = mlp_world(optimizer="sgd")
    for first in (plain, step):  # the first step makes the gradients and the momentum
        torch.manual_seed(5)
        first()
    staged = dtrlab.stage(step, costs="unit")
    graph = staged.plan.graph
    assert len(graph.dropped) == sum(p.grad is not None for p in sm.parameters()) > 0
    old = [weakref.ref(p.grad) for p in sm.parameters()]
    seen = []
    runner_of = staged._runner

    def spied(p):
        runner = runner_of(p)

        def run(*inputs):
            seen.append(sum(r() is not None for r in old))
            return runner(*inputs)
        return run
    monkeypatch.setattr(staged, "_runner", spied)
    torch.manual_seed(7)
    plain_losses = [plain().detach() for _ in range(2)]
    torch.manual_seed(7)
    staged_losses = [staged() for _ in range(2)]
    assert seen[0] == 0  # not one of the previous gradients was alive when the graph ran
    assert_bitwise(plain_losses, staged_losses)
    assert_bitwise(snapshot(pm, po), snapshot(sm, so))

    _, am, ao = mlp_world(optimizer="sgd")
    _, bm, bo = mlp_world(optimizer="sgd")
    x, y = torch.randn(64, 16), torch.randn(64, 4)
    a, b = _accumulating(am, ao, x, y), _accumulating(bm, bo, x, y)
    for first in (a, b):
        torch.manual_seed(5)
        first()
    staged = dtrlab.stage(b, costs="unit")
    assert staged.plan.graph.dropped == ()
    torch.manual_seed(3)
    want = [a().detach() for _ in range(2)]
    torch.manual_seed(3)
    assert_bitwise(want, [staged() for _ in range(2)])
    assert_bitwise(snapshot(am, ao), snapshot(bm, bo))


def test_the_holders_walk_gives_pytorch_s_own_orders():
    """graph._walk takes parameters and buffers in one walk: the same tensors in the order
    Module.parameters() and .buffers() give, with tied, repeated and None entries."""
    import torch.nn as nn

    from dtrlab.staged.graph import Holders, _walk

    shared = nn.Linear(3, 3)
    model = nn.Sequential(nn.BatchNorm1d(3), shared, nn.ReLU(), shared, nn.Linear(3, 2, bias=False))
    model.register_buffer("absent", None)
    model.tied = nn.Linear(3, 3)
    model.tied.weight = shared.weight
    opt = torch.optim.SGD([*model.parameters(), torch.zeros(2, requires_grad=True)], lr=0.1)
    params, buffers = _walk(Holders((model,), (opt,), ()))
    expected = list({id(p): p for p in [*model.parameters(), *opt.param_groups[0]["params"]]}.values())
    assert [id(p) for p in params] == [id(p) for p in expected] and len(params) == 7
    assert [id(b) for b in buffers] == [id(b) for b in model.buffers()] and len(buffers) == 3


def _wide_world(seed: int = 0):
    """A step whose weights are large enough that the staged step takes their new values' storage
    (graph.TAKE_BYTES) rather than copying them back."""
    from dtrlab.staged.graph import TAKE_BYTES

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 8))
    assert model[0].weight.nbytes >= TAKE_BYTES
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(64, 128), torch.randn(64, 8)

    def step():
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x), y).backward()
        opt.step()
    return step, model, opt


@pytest.mark.parametrize("hold_a_view", [False, True])
def test_large_updates_taken_or_copied_are_bitwise_eager_and_seen_through_a_user_s_view(hold_a_view):
    """The updated weights and momenta take their new storage only where no other tensor shares the
    old one: a view of a parameter the user holds sees every update, as in the eager step."""
    (eager, em, eo), (plain, sm, so) = _wide_world(), _wide_world()
    for _ in range(2):  # the momentum buffers exist before staging
        eager()
        plain()
    staged = dtrlab.stage(plain)
    eager_view, staged_view = em[0].weight[:2], sm[0].weight[:2]
    if not hold_a_view:
        del staged_view
    pointer = sm[0].weight.data_ptr()
    eager()
    staged()  # the new value is made while the old storage lives: a taken one has another address
    assert (sm[0].weight.data_ptr() == pointer) == hold_a_view  # copied, or taken: the path this test is for
    for _ in range(2):
        eager()
        staged()
    assert all(torch.equal(a, b) for a, b in zip(snapshot(em, eo), snapshot(sm, so)))
    if hold_a_view:
        assert torch.equal(staged_view, eager_view)


@pytest.mark.slow
def test_the_graph_runs_its_own_code_with_each_operator_at_its_entry():
    # fastcall.fast_forward: no operator left spelled through torch.ops, the same outputs bitwise as the
    # GraphModule's, and a staged call runs it.
    from dtrlab.staged.fastcall import fast_forward

    step, _, _ = mlp_world(optimizer="sgd")
    staged = dtrlab.stage(step, costs="unit")
    staged()
    staged()
    p = staged.plan
    fast = fast_forward(p.module)
    assert "torch.ops." in p.module.code and "torch.ops." not in fast.src
    _, _, inputs = staged._prepared(())
    with torch.no_grad():
        torch.manual_seed(1)  # the same dropout masks for both
        want = p.module(*inputs)
        torch.manual_seed(1)
        got = fast(*inputs)
    assert len(want) == len(got)
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(want, got))
    assert staged._runners[id(p)].src == fast.src
