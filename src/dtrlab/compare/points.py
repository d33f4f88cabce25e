"""The comparison's figures: for one zoo model at given sizes, each mode's measured peak and median
step time, its steps taken in turns with every other mode's so that what else runs on the machine
weighs on all alike.

Owns Point (one mode's figures, a serializable value) and compare (making each mode ready on a
fresh step from one seed, warming it, timing the rounds, measuring each peak once).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Iterable

from ..staged.staging import StagingOutOfMemory
from .modes import Mode, NoBlocks, Runner, prepare
from .world import zoo_step

WARM_STEPS = 2  # the optimizer's first step makes its state; a staged step plans again after it


@dataclass(frozen=True)
class Point:
    """One mode of one model: its measured peak (bytes, by `peak_kind`'s counter) and the median of
    its step times (s); `skipped` says in one line why a mode has no figures (out of memory staged,
    no blocks), `prepare_s` how long making it ready took (staging, compiling, warm steps), and
    `detail` what the mode decided (compile-dtr: how many of the partitioner's candidates DTR recomputes)."""

    model: str
    mode: str
    setting: float | None
    peak_bytes: int | None
    step_s: float | None
    peak_kind: str = "storages"
    prepare_s: float = 0.0
    skipped: str = ""
    detail: str = ""

    @property
    def label(self) -> str:
        return Mode(self.mode, self.setting).label

    def as_dict(self) -> dict:
        return asdict(self)


def _ready(name: str, sizes: dict, mode: Mode, costs: str, seed: int) -> tuple[Runner | None, float, str]:
    t0 = time.perf_counter()
    try:
        runner = prepare(mode, zoo_step(name, sizes, seed), costs=costs)
        for _ in range(WARM_STEPS):
            runner.step()
    except (StagingOutOfMemory, NoBlocks) as e:
        return None, time.perf_counter() - t0, str(e).split(":")[0] if isinstance(e, StagingOutOfMemory) else str(e)
    return runner, time.perf_counter() - t0, ""


def compare(name: str, sizes: dict, modes: Iterable[Mode], repeat: int = 5, costs: str = "measured",
            seed: int = 0) -> list[Point]:
    """Each of `modes` on `name`'s zoo step at `sizes` (a fresh step from `seed` each): made ready and
    warmed, then `repeat` rounds in which every ready mode takes one step in turn (the medians), then
    one step of each under its peak counter."""
    modes = list(modes)
    ready: list[tuple[Mode, Runner | None, float, str]] = []
    for mode in modes:
        runner, prepare_s, why = _ready(name, sizes, mode, costs, seed)
        ready.append((mode, runner, prepare_s, why))
    times: dict[int, list[float]] = {i: [] for i, (_, r, _, _) in enumerate(ready) if r is not None}
    for _ in range(repeat):
        for i in times:
            t0 = time.perf_counter()
            ready[i][1].step()
            times[i].append(time.perf_counter() - t0)
    points = []
    for i, (mode, runner, prepare_s, why) in enumerate(ready):
        if runner is None:
            points.append(Point(name, mode.name, mode.setting, None, None, prepare_s=prepare_s, skipped=why))
            continue
        points.append(Point(name, mode.name, mode.setting, runner.peak_bytes(), statistics.median(times[i]),
                            runner.peak_kind, prepare_s, detail=runner.detail()))
    return points
