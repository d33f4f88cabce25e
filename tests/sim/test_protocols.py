"""The engines' named interfaces (sim/protocols.py): both engines following a program are
FollowedEngines with explicit members, an executor is an Executor, and the live session reaches its
engine through those members only (read from its source), so a third driver needs nothing else."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from conftest import require_compiled
from dtrlab.sim import cengine, protocols
from dtrlab.sim.policies import get_policy
from dtrlab.sim.pyengine import Engine
from dtrlab.sim.runtimes import get_runtime
from dtrlab.sim.simulate import compiled_available
from helpers import synthetic_program

SESSION = Path(__file__).resolve().parents[2] / "src" / "dtrlab" / "live" / "session.py"


class _Executor:
    def __init__(self) -> None:
        self.log: list[tuple] = []

    def compute(self, op: int, tensors: list[int], remat: bool) -> int:
        self.log.append(("compute", op))
        return 1000

    def drop(self, storage: int, by_policy: bool) -> None:
        self.log.append(("drop", storage))


def _members(proto) -> set[str]:
    names = set()
    for cls in proto.__mro__:
        if cls in (protocols.Protocol, object) or not issubclass(cls, protocols.Protocol):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names


def _engines(program, ex):
    policy, runtime = get_policy("dtr"), get_runtime("eager-optimized")
    out = [Engine.follow_program(program, ex, math.inf, policy, runtime, 0)]
    if compiled_available():
        out.append(cengine.Follower(program, ex, math.inf, policy, runtime, 0, fixed_costs=True))
    return out


def test_both_engines_are_followed_engines_with_every_member_their_own():
    require_compiled()
    program = synthetic_program(3, 40)
    ex = _Executor()
    assert isinstance(ex, protocols.Executor)
    engines = _engines(program, ex)
    assert len(engines) == 2
    for engine in engines:
        assert isinstance(engine, protocols.FollowedEngine), type(engine)
        # explicit members: each is found on the class or set on the instance, none by __getattr__
        for name in _members(protocols.FollowedEngine):
            assert name in dir(type(engine)) or name in vars(engine), (type(engine).__name__, name)
        engine.step_to(len(program.step_kind))
        assert engine.clock > 0 and engine.peak >= engine.memory >= 0
    assert not isinstance(object(), protocols.FollowedEngine)


def test_the_live_session_reaches_its_engine_through_the_named_members_only():
    """Every `….engine.NAME` (and a name annotated with a protocol) in live/session.py is a member of
    FollowedEngine, or of LoweringEngine where the unplanned path names it."""
    tree = ast.parse(SESSION.read_text())
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute) and node.value.attr == "engine"}
    lowering = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name) and node.value.id == "lowering"}
    assert used, "the session no longer names its engine as self.engine: update this test"
    assert used <= _members(protocols.FollowedEngine), used - _members(protocols.FollowedEngine)
    assert lowering <= _members(protocols.LoweringEngine), lowering - _members(protocols.LoweringEngine)


def test_the_live_session_is_an_executor():
    pytest.importorskip("torch")
    from dtrlab.live.session import LiveSession

    for name in _members(protocols.Executor):
        assert callable(getattr(LiveSession, name)), name
