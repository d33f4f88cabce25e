"""report.pool: tasks on spawned worker processes know the formula policies the report's process
registered by name (a leaderboard's figure names them), and a task's error reaches the caller."""

from __future__ import annotations

import pytest

from dtrlab.errors import UsageError
from dtrlab.report import pool
from dtrlab.sim.policies import POLICIES, get_policy, register_policy


@pytest.mark.slow
def test_workers_know_the_parents_named_formulas():
    tasks = [pool.Task(get_policy, ("test-pool-mine",), f"task {k}") for k in range(3)]
    with pytest.raises(UsageError, match="unknown policy 'test-pool-mine'"):
        pool.run_tasks(tasks, {}, workers=2)
    register_policy("test-pool-mine", "score: size / (staleness + 1)", replace=True)
    try:
        done = []
        pool.run_tasks(tasks, {}, workers=2, tick=done.append)
        assert sorted(done) == ["task 0", "task 1", "task 2"]
    finally:
        POLICIES.pop("test-pool-mine", None)
