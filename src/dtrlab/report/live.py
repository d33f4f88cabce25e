"""The report's live section: the zoo's training steps run for real under budgets, against the simulator.

Owns which budgets the report runs live (LIVE_RATIOS, MEASURED_RATIO; the zoo at ZooModel.small) and
the section's rows. Each zoo model is captured (its plan), then run by the live runtime at each
ratio of the plan's peak on the logical clock (it must make the simulation's decisions: every
eviction, every rematerialization, the final clock) and at one ratio on the measured clock (each
run costs its real time: where the decisions part from the simulation's is the finding). Without
torch the section says so and runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

# Of each plan's peak. At 0.7 the small LSTM thrashes (thousands of evictions, tens of times its
# compute): seconds live on the compiled engine; docs/live.md has the study's windows.
LIVE_RATIOS = (0.7, 0.8, 0.9, 0.95)  # on the logical clock
MEASURED_RATIO = 0.9
LIVE_POLICY = "dtr"


@dataclass(frozen=True)
class LiveRow:
    """One live step beside the simulation of its plan at the same budget."""

    model: str
    clock: str
    ratio: float
    budget_bytes: int
    live_outcome: str
    sim_outcome: str
    live_evictions: int
    sim_evictions: int
    live_remats: int
    sim_remats: int
    live_overhead: float | None
    sim_overhead: float | None
    same_decisions: bool  # live.runs.same_decisions: the final clock included
    same_evictions: bool  # the same storages evicted in the same order (what a measured run can share)
    wall_ratio: float  # the live step's wall time over a plain step's


@dataclass(frozen=True)
class LiveSection:
    rows: tuple[LiveRow, ...]
    torch: str | None  # torch's version, None when it is not installed

    @property
    def logical_all_same(self) -> bool:
        return all(r.same_decisions for r in self.rows if r.clock == "logical")


def measured_on() -> dict:
    """What decides a section measured in PyTorch beside its own settings: torch's version (None when it
    is not installed) and the machine its clock runs on."""
    import platform
    from importlib import metadata

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    return {"torch": torch, "host": platform.node(), "machine": platform.machine(),
            "python": platform.python_version()}


def decided_by() -> dict:
    """What decides the live section, as the memo's key: the section's settings, torch's version, the
    machine (its clock is measured) and dtrlab's code. A rerun on the same machine reads the
    section kept in the report folder; delete analyses/live-*.pickle there to run it again."""
    return {"ratios": LIVE_RATIOS, "measured": MEASURED_RATIO, "policy": LIVE_POLICY, **measured_on()}


def live_runs() -> int:
    """How many live steps live_section runs (with torch)."""
    from ..capture.zoo import ZOO

    return len(ZOO) * (len(LIVE_RATIOS) + 1)


def live_section(tick=lambda _what: None) -> LiveSection:
    """Every zoo model at its small sizes, captured, then run live at LIVE_RATIOS (logical) and MEASURED_RATIO
    (measured) with LIVE_POLICY; torch seeded with 0 before each model is made; tick(what) after each step."""
    try:
        import torch
    except ModuleNotFoundError:
        return LiveSection((), None)
    from ..capture.recorder import record
    from ..capture.save import to_text
    from ..capture.zoo import ZOO
    from ..live.runs import live_step, plain_seconds, same_decisions, simulate_plan
    from ..live.session import make_plan
    from ..sim.simulate import budget_from_ratio

    rows = []
    for name, model in ZOO.items():
        torch.manual_seed(0)
        step = model.make(**model.small)
        step()
        plain_s = plain_seconds(step, "cpu")
        plan = make_plan(to_text(record(step), name))
        program = plan.program
        runs = [("logical", r) for r in LIVE_RATIOS] + [("measured", MEASURED_RATIO)]
        for clock, ratio in runs:
            budget = budget_from_ratio(program, ratio)
            live = live_step(step, budget, LIVE_POLICY, clock, 0, "cpu", plan)
            sim = simulate_plan(program, budget, LIVE_POLICY, 0)
            tick(f"{name} at {ratio:g}, {clock} clock")
            rows.append(LiveRow(name, clock, ratio, budget, live.outcome, sim.outcome, live.evictions,
                                sim.evictions, live.remats, sim.remats, live.overhead, sim.overhead,
                                same_decisions(live, sim), live.evicted == sim.evicted, live.wall_s / plain_s))
    return LiveSection(tuple(rows), torch.__version__)
