"""The optimal solver's names and defaults, and SolveSettings (what decides a solve's answer besides the
trace and the budget), in one numpy-free module (the CLI and the sweep's keys import it at start-up).

Used by solvers.py, solve.py, commands.py, and by sweep (the `optimal` policy's specs and rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UsageError

SOLVERS = ("highs", "cpsat")
DEFAULT_SOLVER = "highs"
DEFAULT_TIME_LIMIT_S = 600.0
DEFAULT_GAP = 1e-4  # the overhead gap at which a solve stops: (best - bound) <= gap x the program's compute
DEFAULT_THREADS = 1

# The heuristics whose runs give the best schedule of a trace too large for the model (optimal.solve's
# portfolio_best): the DTR authors' policies that run on the default runtime (not random; not the
# fresh-traversal ones, slow on long traces) and the remedies. A run that ends ok under a budget is a
# schedule for it and for every larger one.
PORTFOLIO = ("dtr", "dtr-eq", "dtr-local", "msps", "lru", "size", "dtr-ancestors-sq", "dtr-ancestors",
             "dtr-cost-sq")
# And one maker that is no eviction policy: the chain schedule (chain.py), a checkpointing plan over the
# forward's stages, the portfolio's one answer where every policy thrashes or runs out of memory.
CHAIN_MAKER = "chain"
# The plans the chain schedule tries (chain.py: Griewank's over states; rotor's, which also keeps
# activations). A bound-only row's store key names them, so rows made before a plan came are not reused.
CHAIN_PLANS = ("griewank", "rotor")

# Polishing the start window by window before the branch and bound (polish.py): the kinds of windows,
# in the order their phases take turns (lazy: the first model's rows, exact rows where a stage crossed;
# exact: exact rows throughout), a window's width in stages, the most seconds one window's solve may
# take, and the share of a solve's time left after the start that polishing may take (it stops sooner
# once it improves nothing). A solve's store key names them, so rows made before the polishing came, or
# with other settings, are made again.
LAZY, EXACT = "lazy", "exact"
POLISH_KINDS = (LAZY, EXACT)
WINDOW_STAGES = 20
WINDOW_TIME_S = 10.0
POLISH_SHARE = 0.5

# The least budget's bisections (least.py) stop within this share of the trace's peak.
LEAST_BUDGET_STEP = 0.001

# The name a sweep (and its store's policy column) gives the solver: one more maker of results beside
# the eviction policies (`dtrlab sweep --policy optimal`). No eviction policy may take it.
OPTIMAL_POLICY = "optimal"  # = sim.policies.SOLVER_NAME (a test holds them equal)


@dataclass(frozen=True)
class SolveSettings:
    """One solve's settings: the solver, its time limit for the whole solve, the gap at which it stops,
    and whether the model is left out (bound_only: the crossing bound and the PORTFOLIO's best schedule,
    for traces too large for the model). A sweep row's key holds them (and the portfolio, without the
    model); the solver's threads are one (a sweep runs a solve a core)."""

    solver: str = DEFAULT_SOLVER
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    gap: float = DEFAULT_GAP
    bound_only: bool = False

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise UsageError(f"unknown solver {self.solver!r} (known: {', '.join(SOLVERS)})")
        if not (self.time_limit_s > 0 and math.isfinite(self.time_limit_s)):
            raise UsageError(f"--time-limit must be a positive number of seconds, got {self.time_limit_s}")
        if not 0 <= self.gap < 1:
            raise UsageError(f"--gap must be in [0, 1), got {self.gap}")
        # canonical numbers: 60 and 60.0 are one setting, so one key
        object.__setattr__(self, "time_limit_s", float(self.time_limit_s))
        object.__setattr__(self, "gap", float(self.gap))
        object.__setattr__(self, "bound_only", bool(self.bound_only))

    def key(self) -> dict:
        """What a store key holds of these settings."""
        key = {"solver": self.solver, "time_limit_s": self.time_limit_s, "gap": self.gap,
               "bound_only": self.bound_only}
        if self.bound_only:  # its answer is the portfolio's too
            key["portfolio"] = [*PORTFOLIO, *(f"{CHAIN_MAKER}:{plan}" for plan in CHAIN_PLANS)]
        else:  # and the polishing's
            key["polish"] = {"kinds": list(POLISH_KINDS), "window_stages": WINDOW_STAGES,
                             "window_time_s": WINDOW_TIME_S, "share": POLISH_SHARE}
        return key
