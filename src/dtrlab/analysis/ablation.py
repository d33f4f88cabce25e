"""The ablation table: every ab-* policy over one budget window, with its switches and inversions.

Shows which score terms (cost, size, staleness) the regime switches and inversions come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..sim.policies import ablation_policies
from ..sim.runtimes import DEFAULT_RUNTIME
from ..trace.lower import Program
from .feasibility import inversions
from .regimes import DEFAULT_FACTOR, switches
from .scan import scan


@dataclass(frozen=True)
class AblationRow:
    """One policy over the window."""

    policy: str
    runs: int
    feasible: int
    min_feasible_ratio: float | None
    switches: int
    max_factor: float | None  # the largest switch factor
    inversions: int
    infeasible_inside: int  # budgets inside inversions

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def ablate(program: Program, ratios: Sequence[float], runtime: str = DEFAULT_RUNTIME,
           factor: float = DEFAULT_FACTOR, policies: Sequence[str] | None = None,
           advance: Callable[[], None] | None = None, seed: int = 0, engine: str = "auto") -> list[AblationRow]:
    """Scan each ablation policy (or `policies`) over `ratios` and tabulate its switches and inversions."""
    names = list(policies) if policies is not None else [p.name for p in ablation_policies()]
    rows = []
    for name in names:
        runs = scan(program, ratios, name, runtime, advance=advance, seed=seed, engine=engine)
        sw, inv = switches(runs, factor), inversions(runs)
        ok = [r for r in runs if r.feasible]
        rows.append(AblationRow(name, len(runs), len(ok), min((r.ratio for r in ok), default=None), len(sw),
                                max((s.factor for s in sw), default=None), len(inv),
                                sum(len(i.infeasible) for i in inv)))
    return rows
