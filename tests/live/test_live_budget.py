"""Accounting: after every operator the bytes held (counted by storage identity, apart from the
session's counter) are within the budget; a budget that cannot be met is a named error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.live.session import LiveBudgetError, LiveSession  # noqa: E402
from live_helpers import deterministic_torch, compare_training, resident_by_identity, same_bits  # noqa: E402,F401 (an autouse fixture)

RATIOS = (0.3, 0.45, 0.6, 0.75, 0.9)
def _zoo(name: str):
    def make():
        torch.manual_seed(0)
        step = ZOO[name].make(**ZOO[name].small)  # room to evict: ZooModel.small
        return step.model, step

    return make


def _unbounded_peak(name: str, plan) -> int:
    session = LiveSession(plan=plan)
    _, step = _zoo(name)()
    with session:
        step()
    return session.peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("planned", [False, True], ids=["unplanned", "planned"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_budget_holds_after_every_operator(name, planned):
    """Planned, room is made before each operator runs; unplanned, once it has run: either way the
    bytes held after it are within the budget."""
    plan = record(_zoo(name)()[1]).instructions if planned else None
    peak = _unbounded_peak(name, plan)
    outcomes = {}
    for ratio in RATIOS:
        budget = int(ratio * peak)
        held = []

        def check(session: LiveSession) -> None:
            counted = resident_by_identity(session)
            assert counted == session.resident_bytes  # the counter agrees with the values held
            held.append(counted)
            assert counted <= budget, f"{name} at {ratio}: {counted} bytes held, budget {budget}"

        try:
            session, pairs = compare_training(_zoo(name), dict(budget_bytes=budget, after_op=check, plan=plan))
        except LiveBudgetError as e:
            assert "pinned:" in str(e) and "locked by the operator in flight" in str(e)
            outcomes[ratio] = "cannot be met"
            continue
        assert held and max(held) <= budget
        assert all(same_bits(a, b) for _, a, b in pairs)
        outcomes[ratio] = session.evictions
    met = [r for r, o in outcomes.items() if o != "cannot be met"]
    assert met and outcomes[max(RATIOS)] != "cannot be met", outcomes
    assert any(outcomes[r] > 0 for r in met), outcomes  # the budget really evicted somewhere
