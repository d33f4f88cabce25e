"""The live session is two kinds over one base: a plan makes a PlannedSession, none an
UnplannedSession; the base holds what both do and branches on no plan."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.live.session import LiveSession, PlannedSession, UnplannedSession  # noqa: E402

SESSION = Path(__file__).resolve().parents[2] / "src" / "dtrlab" / "live" / "session.py"


def _step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    x = torch.randn(4, 8)

    def step():
        model.zero_grad(set_to_none=True)
        model(x).square().sum().backward()
        return [p.grad for p in model.parameters()]

    return step


def test_a_plan_makes_the_planned_kind_and_both_run_the_step_alike():
    step = _step()
    plan = record(step).instructions
    kinds = {type(LiveSession(plan=plan)), type(LiveSession()), type(LiveSession(1 << 30, "dtr", "logical", plan))}
    assert kinds == {PlannedSession, UnplannedSession}
    grads = {}
    for kind, session in (("planned", LiveSession(plan=plan)), ("unplanned", LiveSession())):
        with session:
            out = step()
        grads[kind] = [session.value(g).clone() for g in out]
        assert session.operators > 0 and session.engine_name in ("c", "python")
    plain = [g.clone() for g in step()]
    for kind, got in grads.items():
        assert all(torch.equal(a, b) for a, b in zip(got, plain)), kind


def test_the_base_class_does_not_branch_on_the_plan():
    tree = ast.parse(SESSION.read_text())
    base = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LiveSession")
    branches = [n.lineno for n in ast.walk(base) if isinstance(n, ast.Compare)
                and any(isinstance(c, ast.Constant) and c.value is None for c in n.comparators)
                and isinstance(n.left, ast.Attribute) and n.left.attr == "_plan"]
    # only the plan property and the check whether the compiled engine may follow it
    assert len(branches) <= 2, branches
