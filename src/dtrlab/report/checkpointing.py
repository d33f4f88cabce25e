"""The report's checkpointing section (`dtrlab reproduce --checkpointing`): the staged DTR step beside
PyTorch's own ways to trade time for memory, each mode's real peak measured and its steps timed in
turns with the others' (dtrlab.compare, docs/checkpointing.md), and DTR's verdict at matched memory.

Owns which models, sizes and modes the report runs (every zoo model at ZooModel.small: plain,
checkpoint, sac and staged at STAGED_RATIOS; compiled at COMPILE_BUDGETS, and with DTR's knapsack at
COMPILE_DTR_RATIOS, on COMPILE_MODELS only), the section's value and its memo key. Without torch the section says so and runs nothing.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

from ..compare.matched import DTR_LOSES, DTR_WINS, NONE_FITS, Matched, at_matched_memory
from .live import measured_on

EAGER_MODES = ("plain", "checkpoint", "sac")
COMPILED = ("compile", "compile-dtr")  # the modes run by inductor (their peaks are the allocator's)
STAGED_RATIOS = (1.0, 0.8, 0.7, 0.6, 0.5)  # of each staged step's own unconstrained peak
# Inductor takes 30 s to 2 min a budget on this machine, and at the zoo's small sizes ResNet-8 (width 4)
# corrupts the heap in inductor's compiled backward (docs/checkpointing.md): the Transformer only.
COMPILE_BUDGETS = (0.1, 0.5, 0.9)  # torch._functorch.config.activation_memory_budget
COMPILE_MODELS = ("transformer",)
# compile-dtr's, of the joint graph's own peak: at the small sizes its inputs fill most of it, and DTR
# fits the Transformer's down to about 0.9 (docs/checkpointing.md)
COMPILE_DTR_RATIOS = (1.0, 0.9)
REPEAT = 3  # rounds of steps in turns; a step time is the median of its mode's
THREADS = 1  # torch's intra-op threads while the section runs (as benchmarks/bench_checkpoint.py)


@dataclass(frozen=True)
class ModelSetup:
    """What the section runs on one zoo model: its sizes (the factory's keywords) and its modes, each
    (name, setting) as compare.Mode takes them."""

    model: str
    sizes: dict
    modes: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True)
class ModelRun:
    """One model compared: its words at the sizes run, a compare.Point for each mode (in the setup's
    order; a mode skipped says why), and plain eager's peak by the allocator's count when a mode was
    compiled (the compiled points' yardstick), else None."""

    model: str
    description: str
    points: tuple
    plain_allocator_peak_bytes: int | None


@dataclass(frozen=True)
class CheckpointingSection:
    """Every model's run and the rows at matched memory (compare.matched, each model's in its points'
    order); torch None: it is not installed and nothing ran."""

    runs: tuple[ModelRun, ...]
    matched: tuple[Matched, ...]
    torch: str | None
    repeat: int
    threads: int

    @property
    def points(self) -> tuple:
        return tuple(p for r in self.runs for p in r.points)

    @property
    def figure_data(self) -> dict:
        """What report.plots.checkpointing_curves draws: model -> (points, plain's allocator peak)."""
        return {r.model: (r.points, r.plain_allocator_peak_bytes) for r in self.runs}

    @property
    def compiled_models(self) -> tuple[str, ...]:
        return tuple(r.model for r in self.runs if any(p.mode in COMPILED for p in r.points))

    @property
    def tally(self) -> dict[str, int]:
        """How many matched rows have each verdict."""
        return {v: sum(m.verdict == v for m in self.matched) for v in (DTR_WINS, DTR_LOSES, NONE_FITS)}


def default_setups() -> tuple[ModelSetup, ...]:
    """Every zoo model at its small sizes, in the zoo's order: EAGER_MODES, staged at STAGED_RATIOS and, on
    COMPILE_MODELS, compiled at COMPILE_BUDGETS and with DTR's knapsack at COMPILE_DTR_RATIOS; none without
    torch (the zoo is PyTorch models)."""
    if importlib.util.find_spec("torch") is None:
        return ()
    from ..capture.zoo import ZOO

    modes = tuple((m, None) for m in EAGER_MODES) + tuple(("staged", r) for r in STAGED_RATIOS)
    compiled = tuple(("compile", b) for b in COMPILE_BUDGETS) + tuple(("compile-dtr", r) for r in COMPILE_DTR_RATIOS)
    return tuple(ModelSetup(name, model.small, modes + (compiled if name in COMPILE_MODELS else ()))
                 for name, model in ZOO.items())


def decided_by() -> dict:
    """What decides the section, as the memo's key: every model's sizes and modes, the rounds, the threads,
    torch's version and the machine (its clock is measured; dtrlab's code is added by the caller). A rerun
    on the same machine reads the section kept in the report folder; delete
    analyses/checkpointing-*.pickle there to run it again."""
    setups = [[s.model, s.sizes, s.modes] for s in default_setups()]
    return {"setups": setups, "repeat": REPEAT, "threads": THREADS, **measured_on()}


def checkpointing_section(tick: Callable[[str], None] = lambda _what: None,
                          setups: tuple[ModelSetup, ...] | None = None, repeat: int = REPEAT) -> CheckpointingSection:
    """Each of `setups` (default: default_setups()) through compare.compare (seed 0, `repeat` rounds) on
    THREADS threads (put back after), plain's allocator peak beside any compiled mode, then the rows at
    matched memory; tick(what) after each model."""
    try:
        import torch
    except ModuleNotFoundError:
        return CheckpointingSection((), (), None, repeat, THREADS)
    from ..capture.zoo import ZOO
    from ..compare import Mode, compare

    setups = default_setups() if setups is None else setups
    runs = []
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        for s in setups:
            points = tuple(compare(s.model, s.sizes, [Mode(name, setting) for name, setting in s.modes], repeat=repeat))
            plain_allocator = None
            if any(p.mode in COMPILED for p in points):
                from ..compare.compiled import plain_allocator_peak_bytes

                plain_allocator = plain_allocator_peak_bytes(s.model, s.sizes)
            runs.append(ModelRun(s.model, ZOO[s.model].description(**s.sizes), points, plain_allocator))
            tick(f"{s.model}: {len(points)} modes")
    finally:
        torch.set_num_threads(threads)
    matched = tuple(m for r in runs for m in at_matched_memory(r.points))
    return CheckpointingSection(tuple(runs), matched, torch.__version__, repeat, THREADS)
