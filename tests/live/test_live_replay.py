"""Wrapper and replay: a step under forced evictions gives bitwise the gradients, updated parameters
and buffers of plain PyTorch (the oracle), for the zoo and for hypothesis-generated networks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.errors import UsageError  # noqa: E402
from dtrlab.live.session import LiveBudgetError, LiveSession, LiveTensor  # noqa: E402
from live_helpers import deterministic_torch, compare_training, random_evictions, same_bits  # noqa: E402,F401 (an autouse fixture)


def _zoo_training(name: str):
    """A tiny zoo model's step followed by an SGD update (written in place on the parameters)."""

    def make():
        torch.manual_seed(0)
        step = ZOO[name].make(**ZOO[name].tiny)
        opt = torch.optim.SGD(step.model.parameters(), lr=0.1, momentum=0.9, foreach=False)

        def train():
            step()
            opt.step()

        return step.model, train

    return make


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ZOO))
@pytest.mark.parametrize("p", [0.3, 1.0])
def test_zoo_step_is_bitwise_plain_under_forced_evictions(name, p):
    session, pairs = compare_training(_zoo_training(name), dict(after_op=random_evictions(7, p)))
    bad = [n for n, a, b in pairs if not same_bits(a, b)]
    assert not bad, f"{name}: differs from plain PyTorch in {bad[:5]}"
    assert session.evictions > 20 and session.replays > 20  # the evictions really forced replays


def _network(layers: list[tuple], seed: int):
    """A small network from drawn layers: conv blocks on images, then a flattening view, then
    linear blocks; each block may add a residual, an in-place ReLU, a dropout, a view round trip."""

    def make():
        torch.manual_seed(seed)
        mods = torch.nn.ModuleList()
        c, flat = 3, None
        for kind, width, residual, inplace, dropout, viewtrip in layers:
            if kind == "conv" and flat is None:
                mods.append(torch.nn.Conv2d(c, width, 3, padding=1))
                c = width
            else:
                if flat is None:
                    flat = c * 5 * 5
                mods.append(torch.nn.Linear(flat, width))
                flat = width
        x = torch.randn(2, 3, 5, 5)

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.mods = mods

            def forward(self, y):
                for m, (kind, _, residual, inplace, dropout, viewtrip) in zip(self.mods, layers):
                    if isinstance(m, torch.nn.Linear) and y.dim() > 2:
                        y = y.view(y.shape[0], -1) if y.is_contiguous() else y.reshape(y.shape[0], -1)
                    z = m(y)
                    if residual and z.shape == y.shape:
                        z = z + y
                    if inplace:
                        z = F.relu(z, inplace=True)
                    if dropout:
                        z = F.dropout(z, 0.3, training=True)
                    if viewtrip:
                        z = z.transpose(0, 1).contiguous().transpose(0, 1)
                        z.mul_(0.5)  # an in-place write through a view's result
                    y = z
                return y

        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.05, foreach=False)

        def train():
            net.zero_grad(set_to_none=True)
            net(x).square().mean().backward()
            opt.step()

        return net, train

    return make


_layer = st.tuples(st.sampled_from(["conv", "linear"]), st.integers(1, 4).map(lambda k: 3 * k),
                   st.booleans(), st.booleans(), st.booleans(), st.booleans())


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.lists(_layer, min_size=1, max_size=5), seed=st.integers(0, 2**16),
       p=st.sampled_from([0.2, 0.6, 1.0]))
def test_generated_networks_are_bitwise_plain(layers, seed, p):
    session, pairs = compare_training(_network(layers, seed), dict(after_op=random_evictions(seed, p)), seed)
    bad = [n for n, a, b in pairs if not same_bits(a, b)]
    assert not bad, f"differs in {bad}"


def _live(t: torch.Tensor, session: LiveSession) -> torch.Tensor:
    assert isinstance(t, LiveTensor)
    return session.value(t)


def test_an_old_version_replays_from_the_bytes_it_read():
    """Copy-on-write: a result computed before an in-place write, evicted after it, replays from
    the old bytes; the live alias (a view) sees the write, as in PyTorch."""
    w = torch.randn(4, 3)
    with LiveSession() as session:
        a = w * 2
        v = a.view(-1)
        b = a.exp()
        v.add_(1)
        for s in session.evictable():
            session.evict(s)
        c = a * 3
    a0 = w * 2
    assert same_bits(_live(b, session), a0.exp())
    assert same_bits(_live(a, session), a0 + 1)
    assert same_bits(_live(c, session), (a0 + 1) * 3)
    assert session.replays >= 3


def test_a_constant_written_in_place_is_written_and_its_old_bytes_kept():
    w = torch.randn(5)
    w0 = w.clone()
    with LiveSession() as session:
        b = w.exp()
        w.mul_(3)  # the caller's own tensor changes, as in PyTorch
        for s in session.evictable():
            session.evict(s)
    assert same_bits(w, w0 * 3)
    assert same_bits(_live(b, session), w0.exp())  # replayed from the snapshot


def test_a_random_operator_replays_its_values_and_leaves_the_generator_as_plain():
    torch.manual_seed(3)
    x = torch.randn(64)
    plain = F.dropout(x, 0.5, training=True)
    after_plain = torch.randn(3)
    torch.manual_seed(3)
    x = torch.randn(64)
    with LiveSession() as session:
        d = F.dropout(x, 0.5, training=True)
        for s in session.evictable():
            session.evict(s)
        value = _live(d, session).clone()
        after_live = torch.randn(3)
    assert session.replays > 0
    assert same_bits(value, plain)
    assert same_bits(session.value(after_live), after_plain)


@pytest.mark.slow
def test_a_long_chain_rematerializes_without_recursion():
    x = torch.randn(8)
    with LiveSession() as session:
        y = x
        for _ in range(5000):  # deeper than Python's recursion limit
            y = y + 1
        for s in session.evictable():
            session.evict(s)
        live = session.value(y)
    expected = x
    for _ in range(5000):
        expected = expected + 1
    assert same_bits(live, expected)
    assert session.replays == 5000


def test_an_operator_that_changes_a_shape_in_place_is_refused():
    with LiveSession():
        y = torch.randn(2, 3) * 1
        with pytest.raises(UsageError, match="transpose_.* changes a tensor's shape"):
            y.transpose_(0, 1)


def test_a_budget_below_the_constants_names_what_is_pinned_and_locked():
    w = torch.randn(1000)  # 4,000 bytes, a constant: it cannot even be admitted
    with pytest.raises(LiveBudgetError, match=r"0 bytes resident and 4000 more needed; pinned: 0 bytes in 0 "
                                              r"constants; locked by the operator in flight: 0 bytes"):
        with LiveSession(budget_bytes=3000):
            w * 2
    # Admitted, it is pinned; the product's 4,000 bytes do not fit beside it.
    with pytest.raises(LiveBudgetError, match=r"4000 bytes resident and 4000 more needed; pinned: 4000 bytes "
                                              r"in 1 constants; locked by the operator in flight: 0 bytes"):
        with LiveSession(budget_bytes=6000):
            w * 2


@pytest.mark.parametrize("engine", ["c", "python"])
def test_an_operator_the_plan_does_not_have_runs_on_resident_arguments(engine):
    """An operator that makes and writes no tensor (reading a value: `.item()`) has no instruction
    in a plan: planned, it runs on its arguments' values, rematerialized first where evicted (an
    unplanned rematerialization), and the step's results are plain PyTorch's."""
    from dtrlab.capture.recorder import record

    x = torch.rand(64)

    def step():
        z = x.exp().clamp(max=2.0)
        k = z.sum()
        return [z * float(k.item())]

    plain = step()[0]
    plan = record(step).instructions

    def evict_all(session):
        for s in session.evictable():
            session.evict(s)

    with LiveSession(plan=plan, after_op=evict_all, engine=engine) as session:
        out = step()[0]
    assert session.engine_name == engine
    assert session.unplanned_remats >= 1 and session.replays >= 1
    assert same_bits(session.value(out), plain)
