"""The modes a training step can run in, each made ready on a fresh step as a Runner: the step as
the mode runs it, and the real peak of one step measured.

Owns the modes' names and settings and how each is made: plain eager; torch.utils.checkpoint per
block (whole or selective); staged DTR (dtrlab.stage) at a ratio; torch.compile under an activation
memory budget (compiled.py), or with DTR's choice as its partitioner's knapsack (partitioned.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import DtrlabError
from ..staged.staging import stage
from .blocks import checkpointed, find_blocks
from .peak import eager_peak_bytes
from .world import state_of

PLAIN, CHECKPOINT, SAC, STAGED, COMPILE, COMPILE_DTR = "plain", "checkpoint", "sac", "staged", "compile", "compile-dtr"
MODES = (PLAIN, CHECKPOINT, SAC, STAGED, COMPILE, COMPILE_DTR)
TAKE_SETTING = (STAGED, COMPILE, COMPILE_DTR)


class NoBlocks(DtrlabError):
    """Per-block checkpointing asked of a model that exposes no repeated blocks (blocks.find_blocks)."""


@dataclass(frozen=True)
class Mode:
    """A mode and its setting: the ratio of a staged step's own unconstrained peak (or of the compiled
    joint graph's, compile-dtr), or the activation_memory_budget of a compiled one; None for the others."""

    name: str
    setting: float | None = None

    def __post_init__(self) -> None:
        if self.name not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.name!r}")
        if (self.setting is None) != (self.name not in TAKE_SETTING):
            raise ValueError(f"mode {self.name} {'needs' if self.setting is None else 'takes no'} setting")

    @property
    def label(self) -> str:
        return self.name if self.setting is None else f"{self.name} {self.setting:g}"


@dataclass(frozen=True, eq=False)
class Runner:
    """A mode made ready: `step()` runs one training step as the mode runs it; `peak_bytes()` runs one
    under the mode's counter and returns its real peak; `peak_kind` names the counter."""

    mode: Mode
    step: Callable[[], object]
    peak_bytes: Callable[[], int]
    peak_kind: str = "storages"  # live storages by identity; "allocator" for compiled code (compiled.py)
    detail: Callable[[], str] = lambda: ""


def prepare(mode: Mode, world: Callable[[], None], costs: str = "measured") -> Runner:
    """`mode` made ready on `world` (a fresh world.zoo_step). Raises NoBlocks (checkpointing a model
    without blocks) and StagingOutOfMemory (a staged ratio that does not fit). `costs`: how the
    staged step's simulation (and compile-dtr's) costs operators (dtrlab.stage's)."""
    if mode.name == PLAIN:
        return Runner(mode, world, lambda: eager_peak_bytes(world, lambda: state_of(world)))
    if mode.name in (CHECKPOINT, SAC):
        blocks = find_blocks(world.model)
        if not blocks:
            raise NoBlocks(f"{type(world.model).__name__} exposes no repeated blocks to checkpoint")

        def run() -> None:
            with checkpointed(blocks, selective=mode.name == SAC):
                world()
        return Runner(mode, run, lambda: eager_peak_bytes(run, lambda: state_of(world)))
    if mode.name == STAGED:
        staged = stage(world, ratio=mode.setting, costs=costs)
        return Runner(mode, staged, lambda: staged.measured()[1].peak_bytes)
    if mode.name == COMPILE_DTR:
        from .partitioned import partitioned_runner

        return partitioned_runner(mode, world, costs)
    from .compiled import compiled_runner

    return compiled_runner(mode, world)
