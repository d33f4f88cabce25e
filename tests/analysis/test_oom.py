"""explain_oom on a program whose OOM is known by construction, and on resnet32's pinned frontier."""

from __future__ import annotations

import pytest
from cases import chain_program, fan_program
from conftest import needs_shared, public_program

from dtrlab.analysis.oom import explain_oom, format_oom
from dtrlab.errors import UsageError
from dtrlab.sim.instruments import LOCKED, PINNED_CONSTANT
from dtrlab.sim.simulate import budget_from_ratio


def test_fan_in_oom_is_the_locked_inputs():
    # w (pinned constant), a1..a3 = g_i(w) locked as h's inputs; h needs 100 more: 400 + 100 > 400.
    report = explain_oom(fan_program(3), 400)
    assert report.pool_empty and report.need_bytes == 100
    assert report.pinned_bytes == 100 and report.locked_bytes == 300
    assert report.frontier_exceeds_budget and report.shortfall_bytes == 100
    assert [(f.depth, f.op_name, f.remat) for f in report.frames] == [(0, "h", False)]
    whys = {h.name: h.why for h in report.holders}
    assert whys == {"w": PINNED_CONSTANT, "a1": "locked by frame 0", "a2": "locked by frame 0",
                    "a3": "locked by frame 0"}
    text = format_oom(report)
    assert "locked by frame 0" in text and "evictable pool    empty" in text


def test_recursive_remat_stack_is_reported_frame_by_frame():
    # chain of 4 under 400: pinning the outputs at the end rematerializes x3, which needs x2.
    report = explain_oom(chain_program(4), 400)
    assert report.pool_empty and report.frontier_exceeds_budget
    assert all(f.remat for f in report.frames)
    assert report.bytes_by_reason()[PINNED_CONSTANT] == 100


def test_no_oom_is_a_usage_error():
    with pytest.raises(UsageError, match="does not run out of memory"):
        explain_oom(chain_program(3), 10_000)


@needs_shared
def test_resnet32_pinned_frontier_at_0_104():
    p = public_program("resnet32")
    report = explain_oom(p, budget_from_ratio(p, 0.104))
    # The study's claim: every evictable tensor is gone and the pinned + locked frontier of a deep
    # recursive rematerialization, plus the next compute, exceeds the budget.
    assert report.pool_empty
    assert report.pinned_bytes + report.locked_bytes + report.need_bytes > report.budget_bytes
    assert len(report.frames) > 10 and sum(f.remat for f in report.frames) == len(report.frames) - 1
    assert all(h.reason in (PINNED_CONSTANT, LOCKED) for h in report.holders)
    assert report.memory_bytes == sum(h.size_bytes for h in report.holders)
    assert report.to_dict()["depth"] == len(report.frames)
