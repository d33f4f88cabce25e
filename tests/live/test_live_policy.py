"""The live runtime's choice is the simulator's engine's, and its clocks: checked against hand
computations on small steps, against a plan's costs, and against `simulate` on the plan (parity)."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.save import to_program  # noqa: E402
from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.live.runs import simulate_plan, same_decisions, live_step  # noqa: E402
from dtrlab.live import recipes  # noqa: E402
from dtrlab.live.session import LiveBudgetError, LiveSession, PlanMismatch, make_plan  # noqa: E402
from dtrlab.sim import formula as fm  # noqa: E402
from dtrlab.sim.policies import get_policy  # noqa: E402
from dtrlab.sim.simulate import baseline, simulate  # noqa: E402
from dtrlab.trace.read import Call, Mutate  # noqa: E402
from live_helpers import deterministic_torch, same_bits  # noqa: E402,F401 (an autouse fixture)


def _chain(n: int = 6, width: int = 64):
    """x -> exp -> clamp -> exp -> ... : n storages of `width` floats each kept until the step ends,
    which returns the last (the rest are released then: only it is pinned, as a trace pins it)."""
    x = torch.rand(width)

    def step():
        y = x
        outs = []
        for _ in range(n):
            y = y.exp().clamp(max=2.0)
            outs.append(y)
        return [y]

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
    assert first["lru"] == min(first.values())
    assert first["score: -last_access"] > first["lru"]
    assert first["score: 1"] == first["score: -last_access"]  # the last in pool order is the newest


def test_a_live_storage_s_features_are_the_hand_computed_ones():
    """compute, size, staleness and e* of a storage in the live run's engine, against a hand count
    (no plan: every operator costs 1): evict the middle of a chain, score its neighbour."""
    a = torch.rand(16)
    session = LiveSession(policy="dtr")
    with session:
        b = a.exp()        # clock 1 -> 2: b made, a (constant) read
        c = b.exp()        # 2 -> 3: b read at clock 2
        d = c.exp()        # 3 -> 4: c read at 3
        e = d.exp()        # 4 -> 5: d read at 4
        sb, sc, sd = (session.engine.t_storage[session.tensor_id(t)] for t in (b, c, d))
        session.evict(sc)
        f = session.engine._features(sd)
        fb = session.engine._features(sb)
        assert session.clock_ns == 5
    assert session.clock_ns == 6 and session.replays == 1  # c, still alive, is pinned at the end: rerun
    assert (f.compute_ns, f.size_bytes, f.staleness_ns) == (1, 64, 5 - 4)
    assert (f.neighborhood_ns, f.ancestors_ns) == (1, 1)  # c, evicted, behind d
    assert (fb.neighborhood_ns, fb.ancestors_ns, fb.staleness_ns) == (1, 0, 5 - 2)  # c ahead of b
    dtr = get_policy("dtr")
    assert dtr.score(f) == fm.evaluate(dtr.formula, {"compute": 1, "estar": 1, "size": 64, "staleness": 1})
    assert same_bits(session.value(e), a.exp().exp().exp().exp())


def test_a_python_function_policy_runs_live():
    """`module:function` over StorageFeatures, as the simulator takes it: the same choices as the
    formula it spells out (LRU)."""
    step = _chain()
    s0, _ = _run(step)
    runs = [_run(step, budget_bytes=s0.peak_bytes - 512, policy=p)[0].evicted
            for p in ("live_helpers:by_last_access", "lru")]
    assert runs[0] and runs[0] == runs[1]


def _captured(name: str, **sizes):
    torch.manual_seed(0)
    step = ZOO[name].make(**{**ZOO[name].tiny, **sizes})
    step()
    return step, record(step)


def test_the_logical_clock_takes_the_plan_s_costs_and_is_deterministic():
    """With a plan, each operator costs what the plan says: the live clock of an unbounded step is the
    plan's compute + 1, and two runs evict the same storages."""
    step, capture = _captured("resnet32")
    total = sum(i.time_ns for i in capture.instructions if isinstance(i, (Call, Mutate)))
    session, _ = _run(step, plan=capture.instructions)
    assert session.clock_ns == total + 1 == to_program(capture).compute_ns + 1
    runs = []
    for _ in range(2):
        s, _ = _run(step, budget_bytes=int(0.95 * session.peak_bytes), plan=capture.instructions)
        runs.append((s.evicted, s.clock_ns, s.replays))
    assert runs[0] == runs[1] and runs[0][0]


def test_a_plan_of_another_step_is_refused():
    """The first instruction that differs is named, with the plan's in its place."""
    _, capture = _captured("resnet32")
    with pytest.raises(PlanMismatch) as info:
        _run(_chain(), plan=capture.instructions)
    assert re.fullmatch(r"the step differs from its plan at the plan's instruction 3: "
                        r"Memory\(line=0, name='x1', size_bytes=256\) here, "
                        r"Memory\(line=0, name='x1', size_bytes=1536\) in the plan "
                        r"\(a parameter or input of another size: the step made at other sizes\?\); "
                        r"the step was at .*test_live_policy.py:\d+ in step: y = y.exp\(\).clamp\(max=2.0\)",
                        info.value.details), info.value.details
    line = f"dtrlab: {info.value}"  # as the CLI prints it: the user's line, what differs, why
    assert re.fullmatch(r"dtrlab: the step differs from its plan at test_live_policy.py:\d+( \(.*\))?: 256 bytes "
                        r"here, 1,536 bytes in the plan \(a parameter or input of another size: the step made "
                        r"at other sizes\?\)( \(more: dtrlab --debug run \.\.\.\))?", line) and len(line) < 200, line
    step = _chain()
    short = record(_chain(n=2))  # another x: its own constant, then fewer operators
    with pytest.raises(PlanMismatch):
        _run(step, plan=short.instructions)


def test_each_difference_from_the_plan_is_named_with_the_plan_s_instruction():
    """The plan's instruction at the first difference, with what the step did there instead: a
    result of another size, a write the plan does not have, an operator the plan does not have
    that makes a tensor, and a step that ends before its plan does."""
    x = torch.rand(64)

    def repeat(k):
        return lambda: [x.repeat(k).exp()]

    def mismatch(step, plan) -> str:
        with pytest.raises(PlanMismatch) as info:
            _run(step, plan=record(plan).instructions)
        return info.value.details

    assert re.search(r"instruction 5: Memory\(line=0, name='x2', size_bytes=768\) here, "
                     r"Memory\(line=0, name='x2', size_bytes=512\) in the plan", mismatch(repeat(3), repeat(2)))

    def written():
        y = x.exp()
        y.add_(1)
        return [y]

    def kept():
        y = x.exp()
        return [y.add(1)]

    assert re.search(r"Mutate\(line=0, name='aten.add_.Tensor', args=\('x2',\), mutate=\(0,\), time_ns=0\) "
                     r"here, Call\(line=0, name='aten.add.Tensor'", mismatch(written, kept))
    assert re.search(r"the step differs from its plan after the plan's last instruction \(\d+\): Call\(line=0, "
                     r"name='aten.add.Tensor', args=\('x2',\), results=\('\?',\), time_ns=0\) here, "
                     r"where the plan has ended", mismatch(kept, lambda: [x.exp()]))
    assert re.search(r"the step ended before its plan did: Call\(.*name='aten.add.Tensor'.*\) and 2 more "
                     r"instructions are not run", mismatch(lambda: [x.exp()], kept))


def test_the_measured_clock_counts_real_time():
    """Measured, each run costs its elapsed time: first runs and replays alike, so the clock is far
    above the operators' count, and the engine's compute of each storage is its first run's time."""
    step = _chain(n=3, width=1 << 16)
    session, _ = _run(step, clock="measured")
    e = session.engine
    made = [s for s in range(len(e.s_size)) if not e.pinned[s]]
    assert session.clock_ns > 1 + 10 * session.operators and all(e.s_compute[s] > 0 for s in made)
    assert session.clock_ns == 1 + sum(e.op_cost)


RATIOS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["c", "python"])
@pytest.mark.parametrize("policy", ["dtr", "lru"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_decision_parity_with_simulate_on_the_plan(name, policy, engine):
    """Logical clock, costs from the trace captured of the same step: at each ratio of the trace's
    peak, the live run's outcome, its sequence of evicted storages (one by one), its count of
    rematerializations and its final clock are `simulate`'s on that trace (eager-optimized), and its
    gradients are plain PyTorch's. Unbounded, the clock is the trace's compute + 1. On both engines:
    the compiled one following the plan's program, and the Python one following its lowering."""
    step, capture = _captured(name)
    plan = make_plan(capture.instructions)
    program = plan.program
    peak = baseline(program).peak_bytes
    unbounded = live_step(step, 2**62, policy, "logical", 0, "cpu", plan, engine=engine)
    assert unbounded.clock_ns == program.compute_ns + 1 and unbounded.evictions == 0
    outcomes = []
    for ratio in RATIOS:
        budget = int(peak * ratio)
        live = live_step(step, budget, policy, "logical", 0, "cpu", plan, engine=engine)
        sim = simulate_plan(program, budget, policy, 0)
        assert same_decisions(live, sim), (ratio, live.to_dict(), sim.to_dict())
        assert live.peak_bytes == sim.peak_bytes
        outcomes.append((live.outcome, live.evictions))
    assert sum(n for _, n in outcomes) > 0, outcomes  # the budgets bite
    assert simulate(program, None, policy, "eager-optimized").clock_ns == unbounded.clock_ns


def test_unplanned_the_decisions_can_differ_from_the_simulation_and_why():
    """Without a plan the engine learns an operator's outputs only once it has run, so it makes its
    arguments resident (rematerializing) before the operator is in its graph, where a simulation
    has it there already (its outputs count in e*); with the step's own instructions as the plan,
    the same run makes exactly the simulation's decisions. The pinned case: ResNet-32 at 0.5, which
    runs out of memory either way, after 137 evictions unplanned and 137 simulated, not the same
    ones in the same order (149 and 147 before the capture held its written constants, issue 24:
    the peak, and so the budget, grew by batch norm's running statistics' copies)."""
    from dtrlab.capture.recorder import Capture

    torch.manual_seed(0)
    step = ZOO["resnet32"].make(**ZOO["resnet32"].small)
    step()
    own, _ = _run(step)
    stream = tuple(own.namer.out)
    program = to_program(Capture(stream, 0, 0, 0, 0, 0), "resnet32")
    budget = int(baseline(program).peak_bytes * 0.5)
    sim = simulate_plan(program, budget, "dtr", 0)
    unplanned = live_step(step, budget, "dtr", "logical", 0, "cpu", None)
    planned = live_step(step, budget, "dtr", "logical", 0, "cpu", stream)
    assert unplanned.outcome == sim.outcome == "oom"
    assert (len(unplanned.evicted), len(sim.evicted)) == (137, 137)
    assert unplanned.evicted[:5] == sim.evicted[:5] and not same_decisions(unplanned, sim)
    assert same_decisions(planned, sim)


def _fake_elapsed_clock():
    """A clock whose k-th run takes a fixed, varied time: runs then cost the same on every engine
    that makes the same runs in the same order, and not what the plan says."""
    now, calls = [0], [0]

    def clock_ns() -> int:
        calls[0] += 1
        now[0] += (calls[0] * 7919 % 997 + 1) * 1000
        return now[0]

    return clock_ns


@pytest.mark.parametrize("name", ["resnet32", "unet"])
def test_both_engines_decide_alike_on_a_measured_clock(name, monkeypatch):
    """Measured, a first run's cost replaces the plan's in the engine (each storage's compute
    follows): with run times a fixed function of the run's number, the compiled follower and the
    Python engine make the same evictions, replays, clock and peak, under budgets that bite, and
    that clock is not the logical one."""
    step, capture = _captured(name)
    plan = make_plan(capture.instructions)
    peak = baseline(plan.program).peak_bytes
    bites = 0
    for ratio in (0.6, 0.8):
        figures = {}
        for engine in ("c", "python"):
            monkeypatch.setattr(recipes, "elapsed_clock_ns", _fake_elapsed_clock())
            s = LiveSession(int(peak * ratio), clock="measured", plan=plan, engine=engine)
            try:
                with s:
                    step()
            except LiveBudgetError:
                pass
            assert s.engine_name == engine
            figures[engine] = (tuple(s.evicted), s.replays, s.clock_ns, s.peak_bytes)
        assert figures["c"] == figures["python"], ratio
        logical = live_step(step, int(peak * ratio), "dtr", "logical", 0, "cpu", plan)
        assert figures["c"][2] != logical.clock_ns
        bites += len(figures["c"][0])
    assert bites > 0


def test_an_error_of_the_executor_ends_a_compiled_run(monkeypatch):
    """An exception raised while the compiled engine waits on the session (here, an operator's
    replay) reaches the caller of the step unchanged, and the engine then refuses to go on."""
    from dtrlab.live import session as live_session

    step, capture = _captured("resnet32")
    plan = make_plan(capture.instructions)
    real = live_session.execute

    def failing(recipe, values, replay):
        if replay:
            raise ArithmeticError("a replay failed")
        return real(recipe, values, replay)

    monkeypatch.setattr(live_session, "execute", failing)
    s = LiveSession(int(baseline(plan.program).peak_bytes * 0.6), plan=plan, engine="c")
    with pytest.raises(ArithmeticError, match="a replay failed"):
        with s:
            step()
    with pytest.raises(RuntimeError, match="the run is over"):
        s.engine.step()


@pytest.mark.parametrize("engine", ["c", "python"])
def test_a_finished_session_is_collected_with_its_values(engine):
    """A session and its engine hold each other (the engine calls the session back): the cycle is
    the collector's to break, so a finished session, and the values it held, do not outlive it
    once its live tensors are gone (each holds its session)."""
    import gc
    import weakref

    step = _chain()
    session = LiveSession(plan=record(step).instructions, engine=engine)
    with session:
        out = step()
    held = [weakref.ref(v) for v in session.held()]
    gone = weakref.ref(session)
    del session, out
    gc.collect()
    assert gone() is None
    assert sum(r() is not None for r in held) < len(held)  # the step's own tensors went with it
