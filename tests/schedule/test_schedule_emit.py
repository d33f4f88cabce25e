"""A simulation's schedule: every run's replays under its own budget with the run's own clock, peak
and overhead, exactly (public traces and generated programs); both engines write the same one."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedule_cases import computes, schedule, synthetic_program, view_program
from conftest import have_compiled, needs_shared, public_program
from dtrlab.schedule import ScheduleError, check_schedule
from dtrlab.schedule.emit import simulate_schedule
from dtrlab.sim.instruments import Instruments
from dtrlab.sim.runtimes import RUNTIMES
from dtrlab.sim.simulate import budget_from_ratio, simulate
from helpers import compatible_cases


def _replays_as_the_run(program, budget, result, sched):
    """The schedule replays under `budget` with the run's figures; an unfinished run's is a valid
    prefix the checker rejects at its end. Returns the replay."""
    replay = check_schedule(program, sched, budget, complete=result.ok)
    assert (replay.clock_ns, replay.peak_bytes, replay.remat_ns) == (result.clock_ns, result.peak_bytes, result.remat_ns)
    assert replay.overhead == result.overhead
    assert replay.n_free == result.evictions + result.eager_evictions
    assert replay.clock_ns == 1 + sum(int(program.op_cost_ns[o]) for k, o in zip(sched.kind, sched.target) if k == 0)
    if budget is not None:
        assert replay.peak_bytes <= budget
    if result.ok:
        assert replay.n_compute == program.n_ops
    else:
        with pytest.raises(ScheduleError) as info:
            check_schedule(program, sched, budget)
        assert info.value.at_end and info.value.event_index == len(sched)
        assert "ends before the first computation" in info.value.reason or "not resident at the end" in info.value.reason
    return replay


# Each public trace at three ratios; ResNet-32's window where DTR runs out of memory though 0.101
# fits; the LSTM's fast (0.265) and slow (0.266) regimes; a U-Net budget too small for DTR.
PUBLIC = ([(name, r) for name in ("inceptionv4", "lstm", "resnet32", "transformer", "tv_densenet121", "unet")
           for r in (0.4, 0.7, 1.0)]
          + [("resnet32", r) for r in (0.101, 0.102, 0.103, 0.104, 0.105, 0.106, 0.107)]
          + [("lstm", 0.265), ("lstm", 0.266), ("unet", 0.2)])


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("name, ratio", PUBLIC)
def test_every_public_runs_schedule_replays_with_the_simulators_figures(name, ratio):
    program = public_program(name)
    budget = budget_from_ratio(program, ratio)
    result, sched = simulate_schedule(program, budget)
    plain = simulate(program, budget)  # the events cost nothing to the run itself
    assert result.to_dict() == plain.to_dict()
    _replays_as_the_run(program, budget, result, sched)
    assert sched.trace_sha256 == program.sha256 and sched.budget_bytes == budget
    assert sched.made_by == "dtr/eager-optimized"


@needs_shared
def test_an_out_of_memory_runs_prefix_stops_at_the_operator_it_could_not_make():
    program = public_program("resnet32")
    budget = budget_from_ratio(program, 0.104)
    result, sched = simulate_schedule(program, budget)
    assert result.outcome == "oom"
    oom = simulate(program, budget, instruments=Instruments(per_storage=False)).observations.oom
    with pytest.raises(ScheduleError) as info:
        check_schedule(program, sched, budget)
    first = oom.frames[0]  # the engine's own account: the schedule step it was on
    assert not first.remat
    assert f"first computation of operator {first.op} " in info.value.reason


def test_a_hand_programs_schedule_is_the_one_worked_out_by_hand():
    p = view_program()
    # eager: a's storage (1) goes at v's release (its last reference), b's (2) at its own release
    _, eager = simulate_schedule(p, None, "dtr", "eager-optimized")
    assert eager.events() == schedule(p, *computes(0, 1, 2, 3), ("f", 1), ("c", 4), ("f", 2)).events()
    _, lazy = simulate_schedule(p, None, "lru", "lazy")
    assert lazy.events() == schedule(p, *computes(0, 1, 2, 3, 4)).events()
    # at 308 bytes h cannot run with a resident: the policy evicts it (the only candidate) first
    result, tight = simulate_schedule(p, 308, "lru", "lazy")
    assert tight.events() == schedule(p, *computes(0, 1, 2, 3), ("f", 1), ("c", 4)).events()
    assert result.peak_bytes == 308


CASES = compatible_cases()
runs = st.tuples(st.integers(0, 10_000), st.sampled_from(CASES), st.floats(0.05, 1.2), st.integers(0, 3))


def _first_constant_free(program, sched) -> int | None:
    const = program.op_constant[program.tensor_op[program.storage_root]]
    frees = [i for i, (k, x) in enumerate(zip(sched.kind.tolist(), sched.target.tolist())) if k == 1 and const[x]]
    return frees[0] if frees else None


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs)
def test_generated_runs_schedules_replay_and_both_engines_write_the_same(case):
    seed, (policy, runtime), ratio, pseed = case
    program = synthetic_program(seed)
    budget = budget_from_ratio(program, ratio)
    result, sched = simulate_schedule(program, budget, policy, runtime, seed=pseed, engine="python")
    if RUNTIMES[runtime].banishing:
        # The banishing runtime frees a storage for good at its last release, a constant's too;
        # the model keeps constants resident, so the checker refuses its first such free, and
        # a schedule with none replays as the run.
        at = _first_constant_free(program, sched)
        if at is not None:
            with pytest.raises(ScheduleError, match="constants stay resident") as info:
                check_schedule(program, sched, budget, complete=result.ok)
            assert info.value.event_index == at
            return
    _replays_as_the_run(program, budget, result, sched)
    if RUNTIMES[runtime].banishing or not have_compiled():
        return  # the banishing runtime runs on the Python engine only
    c_result, c_sched = simulate_schedule(program, budget, policy, runtime, seed=pseed, engine="c")
    assert c_result.engine == "c"
    assert c_sched.equals(sched)


@needs_shared
@pytest.mark.parametrize("name, ratio, limit", [("resnet32", 0.2, 1.2), ("lstm", 0.266, 2.0)])
def test_a_run_stopped_by_its_overhead_limit_writes_the_prefix_it_made(name, ratio, limit):
    program = public_program(name)
    budget = budget_from_ratio(program, ratio)
    result, sched = simulate_schedule(program, budget, overhead_limit=limit)
    assert result.outcome == "remat_limit"
    replay = _replays_as_the_run(program, budget, result, sched)
    assert replay.remat_ns > (limit - 1) * program.compute_ns  # it stopped just past the limit


@pytest.mark.slow
@needs_shared
def test_the_lstms_fast_schedule_fits_the_budget_where_dtr_is_slow():
    """A schedule that fits a budget fits every larger one: the LSTM's run at 0.265 (1.38x) replays
    under 0.266's budget, where DTR itself takes 10.1x, and ResNet-32's at 0.101 under 0.102-0.106,
    where DTR runs out of memory."""
    lstm = public_program("lstm")
    fast_result, fast = simulate_schedule(lstm, budget_from_ratio(lstm, 0.265))
    slow = simulate(lstm, budget_from_ratio(lstm, 0.266))
    replay = check_schedule(lstm, fast, budget_from_ratio(lstm, 0.266))
    assert replay.overhead == fast_result.overhead < 1.39 and slow.overhead > 10
    resnet = public_program("resnet32")
    _, fits = simulate_schedule(resnet, budget_from_ratio(resnet, 0.101))
    for ratio in (0.102, 0.103, 0.104, 0.105, 0.106):
        budget = budget_from_ratio(resnet, ratio)
        assert simulate(resnet, budget).outcome == "oom"
        assert check_schedule(resnet, fits, budget).peak_bytes <= budget
