"""Scanning budgets: simulate one program under each of a list of budgets and keep the Runs.

Owns the ratio / byte budget notation of the diagnostics (`0.104` is a ratio, `1046362631` bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Callable, Iterable

from ..errors import UsageError
from ..sim.policies import DEFAULT_POLICY
from ..sim.runtimes import DEFAULT_RUNTIME
from ..sim.simulate import budget_from_ratio, simulate
from ..sweep import DEFAULT_STORE
from ..trace.lower import Program
from .runs import Run, by_budget, run_of, runs_of


@dataclass(frozen=True)
class Budget:
    """A budget as the user gave it: ratio None when given in bytes."""

    ratio: float | None
    budget_bytes: int

    @property
    def label(self) -> str:
        return f"{self.ratio:g}" if self.ratio is not None else f"{self.budget_bytes} B"


def parse_budget(program: Program, text: str) -> Budget:
    """A value below 1 is a ratio of the unconstrained peak; a whole number from 1 up is bytes."""
    try:
        d = Decimal(str(text).strip())
    except InvalidOperation:
        raise UsageError(f"budget {text!r} is neither a ratio below 1 nor a number of bytes") from None
    if not d.is_finite() or d <= 0:
        raise UsageError(f"budget {text!r} must be positive")
    if d < 1:
        ratio = float(str(d))
        return Budget(ratio, budget_from_ratio(program, ratio))
    if d != d.to_integral_value():
        raise UsageError(f"budget {text!r}: a ratio is below 1, and bytes are a whole number")
    return Budget(None, int(d))


def scan(program: Program, budgets: Iterable[Budget | float], policy: str = DEFAULT_POLICY,
         runtime: str = DEFAULT_RUNTIME, *, advance: Callable[[], None] | None = None,
         overhead_limit: float | None = None) -> list[Run]:
    """One simulation per budget (a float is a ratio), on the fastest engine; Runs by budget."""
    runs = []
    for b in budgets:
        if not isinstance(b, Budget):
            b = Budget(float(b), budget_from_ratio(program, b))
        res = simulate(program, b.budget_bytes, policy, runtime, overhead_limit=overhead_limit)
        runs.append(run_of(res, b.ratio))
        if advance is not None:
            advance()
    return by_budget(runs)


def scan_stored(source: str, program: Program, ratios: Iterable[float], policy: str = DEFAULT_POLICY,
                runtime: str = DEFAULT_RUNTIME, *, store: str = DEFAULT_STORE,
                executor: str = "local", workers: int | None = None, timeout_s: float | None = None,
                overhead_limit: float | None = None, progress: bool = True) -> list[Run]:
    """`scan` through the sweep store: runs already stored are read back, the rest run in
    parallel and are stored as they finish (a scan run twice simulates nothing the second time)."""
    from ..sweep.grid import build_specs
    from ..sweep.run import run_sweep
    from ..sweep.store import Store

    specs = build_specs(str(source), [program], [policy], [runtime], list(ratios),
                        overhead_limit=overhead_limit)
    with Store(store) as opened:
        run_sweep(specs, opened, executor, workers, timeout_s=timeout_s, progress=progress, report=False)
        frame = opened.rows(s.key for s in specs)
    return runs_of(frame, timeouts=True)
