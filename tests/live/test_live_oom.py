"""Running out of memory anywhere in a live step is an outcome, on both engines: in the optimizer's
step, in a `record_function` block of the user's, in the backward pass. The error is the budget's
(LiveBudgetError, one line) and says where in the step it happened; the decisions until then are
the simulation's."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from conftest import cli_invoke  # noqa: E402
from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.save import save  # noqa: E402
from dtrlab.live.runs import simulate_plan  # noqa: E402
from dtrlab.live.session import LiveBudgetError, LiveSession, make_plan  # noqa: E402
from dtrlab.sim.simulate import baseline  # noqa: E402
from live_helpers import deterministic_torch  # noqa: E402,F401 (an autouse fixture)

SCRIPT = '''
import torch


def make(batch=16, **_):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, 8), torch.randn(batch, 4)

    def step():
        opt.zero_grad()
        with torch.profiler.record_function("my forward"):
            out = model(x)
        torch.nn.functional.mse_loss(out, y).backward()
        opt.step()

    return step
'''


def _script_step(tmp_path):
    path = tmp_path / "adam_step.py"
    path.write_text(SCRIPT)
    namespace: dict = {}
    exec(compile(SCRIPT, str(path), "exec"), namespace)
    return path, namespace["make"]()


def _outcomes(step, plan, engine):
    """(ratio, the LiveBudgetError's `where` or "ok", the session) from 1.0 down in steps of 0.05."""
    peak = baseline(plan.program).peak_bytes
    for k in range(20):
        ratio = round(1.0 - 0.05 * k, 2)
        session = LiveSession(int(peak * ratio), plan=plan, engine=engine)
        try:
            with session:
                step()
            yield ratio, "ok", session, None
        except LiveBudgetError as exc:
            yield ratio, exc.where, session, exc


@pytest.mark.parametrize("engine", ["c", "python"])
def test_out_of_memory_in_the_optimizer_and_in_a_profiler_block_is_an_outcome(engine, tmp_path):
    """Budgets from 1.0 of the plan's peak down: the step runs out of memory in the optimizer's step
    (inside the `record_function` block Optimizer.step opens), in the user's own `record_function`
    block, and in the backward pass. Each is the budget's error naming the user's line and the part
    of the step; the run stopped where the simulation stops, after the same evictions. Before, the
    compiled engine's stop surfaced as "the run is over" from the block's exit."""
    path, step = _script_step(tmp_path)
    step()
    plan = make_plan(record(step).instructions)
    seen = set()
    for ratio, where, session, exc in _outcomes(step, plan, engine):
        sim = simulate_plan(plan.program, int(baseline(plan.program).peak_bytes * ratio), "dtr", 0)
        assert (where == "ok") == (sim.outcome == "ok"), ratio
        assert tuple(session.evicted) == sim.evicted and session.replays == sim.remats, ratio
        if exc is not None:
            assert str(exc).startswith(f"out of memory {where}: the budget of ") and "\n" not in str(exc)
            seen.add(where.split(":", 1)[1] if where.startswith("at ") and ":" in where else where)
    assert {"16 (opt.step()), in the optimizer's step", "14 (out = model(x))",
            "15 (torch.nn.functional.mse_loss(out, y).backward()), in the backward pass"} <= seen, seen


@pytest.mark.parametrize("engine", ["c", "python"])
def test_run_reports_an_out_of_memory_optimizer_step_as_simulate_does(engine, tmp_path):
    """`dtrlab run --script` with Adam where the budget runs out in `optimizer.step()`: exit 0 (on
    the compiled engine it was a traceback), outcome oom live and simulated, and every figure of
    the two columns equal, eager evictions and peak included (the verdict compares them now). The
    line says where (the JSON's `oom_at` too) and what was compared."""
    path, step = _script_step(tmp_path)
    step()
    capture = record(step)
    plan = make_plan(capture.instructions)
    ratio = next(r for r, where, _, _ in _outcomes(step, plan, engine) if "optimizer" in where)
    # the run follows this same capture: one captured again would time its operators afresh, and
    # a plan's costs decide which storage DTR evicts, so the OOM could move to another line
    save(capture, tmp_path / "plan.log")
    argv = ["run", "--script", f"{path}:make", "--ratio", str(ratio), "--compare-sim", "--engine", engine,
            "--threads", "1", "--plan", str(tmp_path / "plan.log")]
    done = cli_invoke(*argv, "--json")
    got = json.loads(done.stdout)
    assert done.exit_code in (0, None)
    (live,) = got["steps"]
    assert live["outcome"] == got["simulated"]["outcome"] == "oom" and got["same_decisions"] == [True]
    assert live["oom_at"] == "at adam_step.py:16 (opt.step()), in the optimizer's step"
    sim = got["simulated"]
    assert {k: live[k] for k in sim if k != "runtime"} == {k: v for k, v in sim.items() if k != "runtime"}
    done = cli_invoke(*argv)
    out = " ".join(done.stdout.split())
    assert done.exit_code in (0, None)
    assert "step 1: out of memory at adam_step.py:16 (opt.step()), in the optimizer's step: the budget of" in out
    assert ("step 1: the same decisions as the simulation: the outcome, every eviction in order, the "
            "rematerializations, the eager evictions, the peak and the final clock (all until the step "
            "stopped)") in out
