"""The checker on hand-written programs: each figure computed by hand, each broken schedule
rejected at the event at fault with the reason."""

from __future__ import annotations

import pytest

from schedule_cases import computes, schedule, split_program, view_program
from dtrlab.schedule import HEADER, ScheduleError, check_schedule


def _rejects(program, sched, budget, event, words):
    with pytest.raises(ScheduleError) as info:
        check_schedule(program, sched, budget)
    assert info.value.event_index == event, str(info.value)
    assert words in info.value.reason, str(info.value)
    return info.value


def test_the_program_order_replays_with_hand_figures():
    p = view_program()
    r = check_schedule(p, schedule(p, *computes(0, 1, 2, 3, 4)), None)
    # peak: w 8 + a 100 + b 200 + c 50 while h runs (nothing freed); clock from 1: 1 + 61
    assert (r.peak_bytes, r.clock_ns, r.compute_ns) == (358, 62, 61)
    assert (r.n_compute, r.n_recompute, r.n_free, r.remat_ns) == (5, 0, 0, 0)
    assert r.overhead == 62 / 61


def test_frees_lower_the_peak_and_recomputations_cost_their_time():
    p = view_program()
    # free a's storage (1) before h: h runs on w 8 + b 200 + c 50
    r = check_schedule(p, schedule(p, *computes(0, 1, 2, 3), ("f", 1), ("c", 4), ("f", 2)), 308)
    assert (r.peak_bytes, r.clock_ns, r.n_free) == (308, 62, 2)
    # free a after the view, recompute f then the view (its view must be made again) before g
    r = check_schedule(p, schedule(p, *computes(0, 1, 2), ("f", 1), *computes(1, 2, 3, 4)), None)
    assert (r.n_recompute, r.remat_ns, r.clock_ns) == (2, 11, 73)
    assert r.peak_bytes == 8 + 100 + 200 + 50


def test_an_operator_needs_room_for_every_output_even_a_resident_ones():
    p = split_program()
    # y (storage 2) freed, split again: x is resident, yet both outputs are made (8 + 40 + 40 + 60)
    r = check_schedule(p, schedule(p, *computes(0, 1), ("f", 2), ("c", 1), ("c", 2)), 148)
    assert r.peak_bytes == 148
    _rejects(p, schedule(p, *computes(0, 1), ("f", 2), ("c", 1), ("c", 2)), 147, 3, "crosses the budget")
    # after it the new copy of x is dropped: add runs on 8 + 40 + 60 + 10
    assert check_schedule(p, schedule(p, *computes(0, 1), ("f", 1), ("f", 2), *computes(1, 2)), 118).peak_bytes == 118


def test_an_input_not_resident_is_rejected_at_its_event():
    p = view_program()
    e = _rejects(p, schedule(p, *computes(0, 1), ("f", 1), *computes(2, 3, 4)), None, 3, "not resident")
    assert "freed at event 2" in e.reason and "'a'" in e.reason


def test_a_view_is_gone_with_its_storage_until_it_is_made_again():
    p = view_program()
    _rejects(p, schedule(p, *computes(0, 1, 2), ("f", 1), *computes(1, 3, 4)), None, 5,
             "this view of it was not made again")


def test_the_budget_crossed_is_rejected_at_its_event():
    p = view_program()
    _rejects(p, schedule(p, *computes(0, 1, 2, 3, 4)), 357, 4, "358 B > 357 B")
    _rejects(p, schedule(p, *computes(0, 1, 2, 3, 4)), 307, 3, "crosses the budget")
    _rejects(p, schedule(p, *computes(0, 1, 2, 3, 4)), 7, 0, "crosses the budget")  # a constant counts too


def test_an_output_missing_at_the_end_is_rejected():
    p = view_program()
    sched = schedule(p, *computes(0, 1, 2, 3, 4), ("f", 3))
    _rejects(p, sched, None, 6, "output tensor 'c'")
    # and it passes once recomputed (b is still resident)
    assert check_schedule(p, schedule(p, *computes(0, 1, 2, 3, 4), ("f", 3), ("c", 4)), None).n_recompute == 1


def test_an_operator_out_of_order_is_rejected():
    p = view_program()
    _rejects(p, schedule(p, *computes(0, 2, 1, 3, 4)), None, 1, "before its first computation is due")
    _rejects(p, schedule(p, *computes(0, 1, 2, 4)), None, 3, "before its first computation is due")


def test_a_schedule_that_stops_early_is_rejected_at_the_end_unless_a_prefix_is_asked():
    p = view_program()
    sched = schedule(p, *computes(0, 1))
    _rejects(p, sched, None, 2, "ends before the first computation of operator 2")
    assert check_schedule(p, sched, None, complete=False).n_compute == 2


def test_another_traces_schedule_is_rejected_at_the_header():
    p, other = view_program(), split_program()
    sched = schedule(other, *computes(0, 1, 2, 3, 4))
    e = _rejects(p, sched, None, HEADER, "for another trace")
    assert str(e).startswith("header: ")


@pytest.mark.parametrize("events, event, words", [
    ([("c", 0), ("f", 0)], 1, "constants stay resident"),
    ([("c", 0), ("c", 0)], 1, "is a constant"),
    ([("c", 0), ("f", 1)], 1, "not resident"),
    ([("c", 0), ("c", 1), ("f", 1), ("f", 1)], 3, "freed at event 2"),
    ([("c", 5)], 0, "the trace has 5 operators"),
    ([("f", 4)], 0, "the trace has 4 storages"),
])
def test_other_mistakes_are_rejected(events, event, words):
    p = view_program()
    _rejects(p, schedule(p, *events), None, event, words)


# --- real schedules broken by hand ------------------------------------------------------------

from conftest import needs_shared, public_program  # noqa: E402
from dtrlab.schedule import Schedule  # noqa: E402
from dtrlab.schedule.emit import simulate_schedule  # noqa: E402
from dtrlab.sim.simulate import budget_from_ratio  # noqa: E402


def _without(sched, i):
    keep = [k for k in range(len(sched)) if k != i]
    return Schedule(sched.kind[keep], sched.target[keep], sched.trace_sha256, sched.made_by, sched.budget_bytes)


@needs_shared
def test_dtrs_own_schedule_with_a_recomputation_taken_out_fails_where_the_value_is_next_needed():
    p = public_program("resnet32")
    budget = budget_from_ratio(p, 0.101)
    _, sched = simulate_schedule(p, budget)
    kinds, targets = sched.kind.tolist(), sched.target.tolist()
    seen, tried = set(), 0
    for i, (k, op) in enumerate(zip(kinds, targets)):  # op: a storage for a free
        if k != 0:
            continue
        first = op not in seen
        seen.add(op)
        if first or p.op_n_out[op] != 1 or p.tensor_alias_arg[p.op_out_start[op]] >= 0:
            continue
        out = int(p.op_out_start[op])
        storage = int(p.tensor_storage[out])
        # where the value is next wanted: an operator reading it, a free of its storage, or the
        # end (an output recomputed to be resident there)
        wanted = next((j for j in range(i + 1, len(sched))
                       if (kinds[j] == 0 and out in p.args_of(targets[j]).tolist())
                       or (kinds[j] == 1 and targets[j] == storage)), len(sched))
        broken = _without(sched, i)
        with pytest.raises(ScheduleError) as info:
            check_schedule(p, broken, budget)
        assert info.value.event_index == wanted - 1, (i, str(info.value))
        assert info.value.at_end == (wanted == len(sched))
        tried += 1
        if tried == 20:
            break
    assert tried == 20


@needs_shared
def test_dtrs_own_schedule_under_a_byte_less_than_its_peak_fails_where_the_peak_was():
    from dtrlab.sim.instruments import EVENT_KINDS, Instruments
    from dtrlab.sim.simulate import simulate

    p = public_program("lstm")
    budget = budget_from_ratio(p, 0.265)
    result, sched = simulate_schedule(p, budget)
    log = simulate(p, budget, instruments=Instruments(per_storage=False, events=True)).observations.events
    # the engine's own account: the first (re)computation at whose start resident bytes plus its
    # outputs' reach the peak; its position among the schedule's events
    need = {o: int(p.tensor_size_bytes[p.op_out_start[o]:p.op_out_start[o] + p.op_n_out[o]].sum()) for o in range(p.n_ops)}
    computes = (EVENT_KINDS["compute"], EVENT_KINDS["remat"])
    frees = (EVENT_KINDS["evict"], EVENT_KINDS["evict_eager"])
    memory, event = 0, -1
    for k, t, m in zip(log.kind.tolist(), log.tensor.tolist(), log.memory_bytes.tolist()):
        if k in computes or k in frees:
            event += 1
        if k in computes and memory + need[int(p.tensor_op[t])] == result.peak_bytes:
            break
        memory = m
    with pytest.raises(ScheduleError, match="crosses the budget") as info:
        check_schedule(p, sched, result.peak_bytes - 1)
    assert info.value.event_index == event
    assert check_schedule(p, sched, result.peak_bytes).peak_bytes == result.peak_bytes
