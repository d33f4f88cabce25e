"""Scanning budgets: simulate one program under each of a list of budgets and keep the Runs.

The budget notation (`0.104` and `1.0` are ratios, `1046362631` and `2GiB` bytes) is sim.simulate's.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..sim.policies import DEFAULT_POLICY
from ..sim.runtimes import DEFAULT_RUNTIME
from ..sim.simulate import Budget, budget_from_ratio, parse_budget, simulate  # noqa: F401 - re-exported
from ..sweep import DEFAULT_STORE
from ..trace.lower import Program
from .runs import Run, by_budget, run_of, runs_of




def scan(program: Program, budgets: Iterable[Budget | float], policy: str = DEFAULT_POLICY,
         runtime: str = DEFAULT_RUNTIME, *, advance: Callable[[], None] | None = None,
         overhead_limit: float | None = None, seed: int = 0, engine: str = "auto") -> list[Run]:
    """One simulation per budget (a float is a ratio), on the fastest engine; Runs by budget."""
    runs = []
    for b in budgets:
        if not isinstance(b, Budget):
            b = Budget(float(b), budget_from_ratio(program, b))
        res = simulate(program, b.budget_bytes, policy, runtime, overhead_limit=overhead_limit, seed=seed,
                       engine=engine)
        runs.append(run_of(res, b.ratio))
        if advance is not None:
            advance()
    return by_budget(runs)


def scan_stored(source: str, program: Program, ratios: Iterable[float], policy: str = DEFAULT_POLICY,
                runtime: str = DEFAULT_RUNTIME, *, store: str = DEFAULT_STORE,
                executor: str = "local", workers: int | None = None, timeout_s: float | None = None,
                overhead_limit: float | None = None, progress: bool = True, seed: int = 0,
                engine: str = "auto") -> list[Run]:
    """`scan` through the sweep store: runs already stored are read back, the rest run in
    parallel and are stored as they finish (a scan run twice simulates nothing the second time)."""
    from ..sweep.grid import build_specs
    from ..sweep.run import run_sweep
    from ..sweep.store import Store

    specs = build_specs(str(source), [program], [policy], [runtime], list(ratios),
                        overhead_limit=overhead_limit, seed=seed, engine=engine)
    with Store(store) as opened:
        run_sweep(specs, opened, executor, workers, timeout_s=timeout_s, progress=progress, report=False)
        frame = opened.rows(s.key for s in specs)
    return runs_of(frame, timeouts=True)
