"""The live runtime's choice is the simulator's policy, and its clocks: checked against hand
computations on small steps and against the captured trace of the same step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.errors import UsageError  # noqa: E402
from dtrlab.trace.read import Call, Mutate  # noqa: E402
from dtrlab.live.clocks import MeasuredClock, TableClock, trace_costs  # noqa: E402
from dtrlab.live.graph import OpCost  # noqa: E402
from dtrlab.live.scoring import features  # noqa: E402
from dtrlab.live.session import LiveSession  # noqa: E402
from dtrlab.sim import formula as fm  # noqa: E402
from dtrlab.sim.policies import NEIGHBORHOOD, get_policy  # noqa: E402
from live_helpers import deterministic_torch, same_bits  # noqa: E402,F401 (an autouse fixture)


def _chain(n: int = 6, width: int = 64):
    """x -> exp -> exp -> ... : n storages of `width` floats each, one after the other."""
    x = torch.rand(width)

    def step():
        y = x
        outs = []
        for _ in range(n):
            y = y.exp().clamp(max=2.0)
            outs.append(y)
        return outs

    return step


def _run(step, **kw):
    session = LiveSession(**kw)
    with session:
        out = step()
    return session, out


def test_the_policy_decides_what_is_evicted():
    """Under the same budget, LRU evicts the oldest storage first and "newest first" another: the
    session's choice follows the policy given (all ties go to the last in pool order), and every
    run's results are bitwise plain."""
    step = _chain()
    s0, _ = _run(step)
    budget = s0.peak_bytes - 3 * 256  # three storages too many
    first = {}
    for policy in ("lru", "dtr", "score: -last_access", "score: 1"):
        session, out = _run(step, budget_bytes=budget, policy=policy)
        assert session.evictions > 0 and session.resident_bytes <= budget
        first[policy] = session.evicted[0]
        plain = step()
        assert all(same_bits(session.value(a), b) for a, b in zip(out, plain))
    # storage ids follow creation: LRU takes the oldest made in the step, "-last_access" the newest
    # evictable one, "score: 1" (all tie) the last in pool order: the engine's tie rule.
    made = sorted(set(s.id for s in s0.storages() if not s.constant))
    assert first["lru"] == min(first.values())
    assert first["score: -last_access"] > first["lru"]
    assert first["score: 1"] == first["score: -last_access"]  # the last in pool order is the newest


def test_a_live_storage_s_features_are_the_hand_computed_ones():
    """compute, size, staleness and e* of a storage on the live graph, against a hand count with a
    unit clock (every operator costs 1): evict the middle of a chain, score its neighbour."""
    a = torch.rand(16)
    session = LiveSession()
    with session:
        b = a.exp()        # clock 1 -> 2: b made, a (constant) read
        c = b.exp()        # 2 -> 3: b read at clock 2
        d = c.exp()        # 3 -> 4: c read at 3
        e = d.exp()        # 4 -> 5: d read at 4
    sb, sc, sd = (t._handle.record.storage for t in (b, c, d))
    session.evict(sc)
    f = features(sd, frozenset({NEIGHBORHOOD}), session.clock_ns, session.budget_bytes, session.resident_bytes)
    assert session.clock_ns == 5
    assert (f.compute_ns, f.size_bytes, f.staleness_ns) == (1, 64, 5 - 4)
    assert (f.neighborhood_ns, f.ancestors_ns) == (1, 1)  # c, evicted, behind d
    fb = features(sb, frozenset({NEIGHBORHOOD}), session.clock_ns, session.budget_bytes, session.resident_bytes)
    assert (fb.neighborhood_ns, fb.ancestors_ns, fb.staleness_ns) == (1, 0, 5 - 2)  # c ahead of b
    dtr = get_policy("dtr")
    assert dtr.score(f) == fm.evaluate(dtr.formula, {"compute": 1, "estar": 1, "size": 64, "staleness": 1})
    del e


def test_a_python_function_policy_runs_live():
    """`module:function` over StorageFeatures, as the simulator takes it: the same choices as the
    formula it spells out (LRU)."""
    step = _chain()
    s0, _ = _run(step)
    runs = [_run(step, budget_bytes=s0.peak_bytes - 512, policy=p)[0].evicted
            for p in ("live_helpers:by_last_access", "lru")]
    assert runs[0] and runs[0] == runs[1]


def test_the_logical_clock_takes_the_trace_s_costs_and_is_deterministic():
    """Costs matched operator by operator with the captured trace of the same step: the live
    clock of an unbounded step is the trace's compute + 1, and two runs evict the same storages."""
    torch.manual_seed(0)
    step = ZOO["resnet32"].make(**ZOO["resnet32"].tiny)
    step()
    capture = record(step)
    table = trace_costs(capture)
    total = sum(c.total_ns for _, c in table)
    assert total == sum(i.time_ns for i in capture.instructions if isinstance(i, (Call, Mutate)))
    session, _ = _run(step, clock=TableClock(table))
    assert session.clock_ns == total + 1
    runs = []
    for _ in range(2):
        s, _ = _run(step, budget_bytes=int(0.95 * session.peak_bytes), clock=TableClock(table))
        runs.append((s.evicted, s.clock_ns, s.replays))
    assert runs[0] == runs[1] and runs[0][0]


def test_a_cost_table_of_another_step_is_refused():
    step = _chain()
    with pytest.raises(UsageError, match="does not match the step: operator 1 is aten.exp.default"):
        _run(step, clock=TableClock([("aten.mul.Tensor", OpCost(0, 5))]))


def test_the_measured_clock_counts_real_time():
    step = _chain(n=3, width=1 << 16)
    session, _ = _run(step, clock=MeasuredClock())
    s1 = sorted(s.compute_ns for s in session.storages() if not s.constant)
    assert session.clock_ns > 1 + session.operators and all(c > 0 for c in s1)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_parity_at_an_unbounded_budget_and_where_memory_differs(name):
    """Logical clock, costs from the trace captured of the same step: unbounded, the live final clock
    is the simulator's (compute + 1) on every zoo model. The peaks differ: the trace format models an
    in-place write as a fresh copy (MUTATE), so the simulated peak is above the live one, by at most
    the bytes written in place (Capture.mutated_bytes) plus the constants' snapshots the live run
    keeps; the pinned difference is what makes the same ratio a different budget in the two."""
    from dtrlab.capture.save import to_program
    from dtrlab.sim.simulate import simulate

    torch.manual_seed(0)
    step = ZOO[name].make(**ZOO[name].tiny)
    step()
    capture = record(step)
    program = to_program(capture, name)
    sim = simulate(program, None, "dtr", "eager-optimized")
    session, _ = _run(step, clock=TableClock(trace_costs(capture)))
    session.pin_outputs()
    assert session.clock_ns == sim.clock_ns == program.compute_ns + 1
    assert session.replays == 0 and session.evictions == 0
    gap = sim.peak_bytes - session.peak_bytes
    assert 0 <= gap <= capture.mutated_bytes, (sim.peak_bytes, session.peak_bytes, capture.mutated_bytes)
