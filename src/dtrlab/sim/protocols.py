"""The engines' interfaces, named. A driver that runs real operators (the live runtime,
live/session.py) meets an engine through two of them, and nothing else:

- `Executor`: what an engine asks of whoever runs its operators: run operator `op` (a first run, or a
  rematerialization) for these tensors and say what it cost; drop a storage's bytes.
- `FollowedEngine`: what the driver asks of an engine that takes a whole program a step at a time:
  move to a step, prepare and finish an operator's arguments, make a tensor resident, evict a
  storage, read the pool, the residents and the figures. `pyengine.Engine` (follow, follow_program)
  and `cengine.Follower` implement it with explicit members. `LoweringEngine` adds the one member an
  unplanned run needs, the storages' tensors as the Python engine lowers the step online.

Typing only: no engine imports this module to run.
"""

from __future__ import annotations

from typing import Iterable, Protocol, runtime_checkable


@runtime_checkable
class Executor(Protocol):
    """Runs the operators an engine schedules."""

    def compute(self, op: int, tensors: list[int], remat: bool) -> int:
        """Run `op` to make `tensors` (a rematerialization when `remat`); its cost in ns."""
        ...

    def drop(self, storage: int, by_policy: bool) -> None:
        """Free `storage`'s bytes: evicted by the policy, or freed eagerly (its last use passed)."""
        ...


@runtime_checkable
class FollowedEngine(Protocol):
    """An engine following a program a step at a time, telling an Executor what to run and drop.
    Raises pyengine.OutOfMemory where the budget cannot be met."""

    clock: int
    memory: int
    peak: int
    remat_ns: int
    evictions: int
    eager_evictions: int

    @property
    def pool(self) -> Iterable[int]:
        """The storages the policy may evict now, in the engine's order."""
        ...

    def step_to(self, end: int) -> None:
        """Take the program's steps before `end` not taken yet (the source has reached `end`)."""
        ...

    def step(self) -> None:
        """Take the steps the source has reached and not taken yet."""
        ...

    def prepare(self, args: list[int]) -> None:
        """Make an operator's argument tensors resident and lock them."""
        ...

    def finish(self, args: list[int], op: int | None) -> None:
        """Unlock the arguments after the operator ran."""
        ...

    def materialize(self, t: int) -> None:
        """Make tensor `t` resident (rematerializing what it needs)."""
        ...

    def evict(self, s: int) -> None:
        """Evict storage `s` now (the driver's own decision)."""
        ...

    def residents(self) -> list[tuple[int, int, bool, bool]]:
        """(storage, bytes, pinned, locked) of each storage in memory."""
        ...


@runtime_checkable
class LoweringEngine(FollowedEngine, Protocol):
    """A FollowedEngine on a program lowered while it runs (the Python engine's `follow`)."""

    s_tensors: list[list[int]]
