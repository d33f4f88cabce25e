"""Churn: how two runs of one program differ storage by storage (evictions, re-evictions, recompute).

Owns Churn and compare_runs; per-storage counts come from the compiled engine (the Python one without it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sim.policies import DEFAULT_POLICY, get_policy
from ..sim.result import run_overhead
from ..sim.runtimes import DEFAULT_RUNTIME, get_runtime
from ..sim.simulate import baseline, remat_limit_ns, simulate
from ..sim import cengine
from ..trace.lower import Program
from .scan import Budget


@dataclass(frozen=True)
class Counts:
    """One count over one run, twice: `all` counts policy and eager evictions, `policy` the policy's."""

    all: float
    policy: float


@dataclass(frozen=True)
class RunChurn:
    """One run's evictions: totals, distinct storages, evictions per evicted storage."""

    budget: Budget
    outcome: str
    overhead: float | None  # run_overhead: None for a run that did not finish
    remat_ns: int
    evictions: Counts
    distinct_evicted: Counts
    per_evicted_storage: Counts


@dataclass(frozen=True)
class StorageChurn:
    """One storage in both runs (a: the first budget, b: the second)."""

    storage: int
    name: str
    compute_ns: int
    policy_a: int
    policy_b: int
    all_a: int
    all_b: int
    remat_a: int
    remat_b: int

    @property
    def extra_recompute_ns(self) -> int:
        """(remats in b - remats in a) x the storage's compute: its share of b's extra recompute."""
        return (self.remat_b - self.remat_a) * self.compute_ns


@dataclass(frozen=True)
class Churn:
    """Two runs compared. jaccard: |evicted in both| / |evicted in either|. top: the most
    re-evicted storages of the slower run, with how much of its extra recompute they account for.
    A storage's compute is that of the operators writing it, so a rematerialization of an operator
    with several output storages is counted in each: the split is exact for single-output ops."""

    a: RunChurn
    b: RunChurn
    jaccard: Counts
    slower: str  # "a" or "b"
    extra_remat_ns: int  # slower run's recompute minus the faster's
    top: tuple[StorageChurn, ...]

    @property
    def top_extra_ns(self) -> int:
        sign = 1 if self.slower == "b" else -1
        return sum(sign * s.extra_recompute_ns for s in self.top)

    def to_dict(self) -> dict:
        def side(r: RunChurn) -> dict:
            return {"ratio": r.budget.ratio, "budget_bytes": r.budget.budget_bytes, "outcome": r.outcome,
                    "overhead": r.overhead, "remat_ns": r.remat_ns,
                    "evictions": r.evictions.__dict__, "distinct_evicted": r.distinct_evicted.__dict__,
                    "evictions_per_evicted_storage": r.per_evicted_storage.__dict__}
        return {"a": side(self.a), "b": side(self.b), "jaccard": self.jaccard.__dict__, "slower": self.slower,
                "extra_remat_ns": self.extra_remat_ns, "top_extra_recompute_ns": self.top_extra_ns,
                "top": [dict(s.__dict__, extra_recompute_ns=s.extra_recompute_ns) for s in self.top]}


def storage_compute_ns(program: Program) -> np.ndarray:
    """Per storage, the cost of the distinct operators writing its tensors (the engine's s_compute)."""
    pairs = np.unique(np.stack([program.tensor_storage.astype(np.int64), program.tensor_op.astype(np.int64)]), axis=1)
    out = np.zeros(program.n_storages, np.int64)
    np.add.at(out, pairs[0], program.op_cost_ns[pairs[1]])
    return out


def storage_counts(program: Program, budget_bytes: int, policy: str, runtime: str,
                   overhead_limit: float | None = None, seed: int = 0, engine: str = "auto") -> tuple[dict, dict]:
    """(counters, per-storage arrays policy_evictions / eager_evictions / rematerializations);
    overhead_limit stops the run as simulate's does (a stored remat_limit run is replayed alike)."""
    pol, rt = get_policy(policy), get_runtime(runtime)
    if engine != "python" and cengine.supports(pol, rt, program):
        out = cengine.run_compiled(program, budget_bytes, pol, rt, remat_limit_ns(program, overhead_limit), seed,
                                   counts=True)
        return out, out.pop("storage_counts")
    from ..sim.instruments import Instruments

    res = simulate(program, budget_bytes, pol, rt, overhead_limit=overhead_limit, seed=seed, engine=engine,
                   instruments=Instruments(oom_snapshot=False))
    o = res.observations
    return ({"outcome": res.outcome, "clock_ns": res.clock_ns, "remat_ns": res.remat_ns},
            {"policy_evictions": o.policy_evictions, "eager_evictions": o.eager_evictions,
             "rematerializations": o.rematerializations})


def jaccard(x: np.ndarray, y: np.ndarray) -> float:
    """|evicted in both| / |evicted in either| of two per-storage counts (1.0 when neither evicts)."""
    either = np.count_nonzero((x > 0) | (y > 0))
    return float(np.count_nonzero((x > 0) & (y > 0)) / either) if either else 1.0


def _side(budget: Budget, counters: dict, arrays: dict, compute_ns: int) -> RunChurn:
    pol, eag = arrays["policy_evictions"], arrays["eager_evictions"]
    every = pol + eag
    n_all, n_pol = int(every.sum()), int(pol.sum())
    d_all, d_pol = int(np.count_nonzero(every)), int(np.count_nonzero(pol))
    return RunChurn(budget, counters["outcome"], run_overhead(counters["outcome"], counters["clock_ns"], compute_ns),
                    int(counters["remat_ns"]),
                    Counts(n_all, n_pol), Counts(d_all, d_pol),
                    Counts(n_all / d_all if d_all else 0.0, n_pol / d_pol if d_pol else 0.0))


def compare_runs(program: Program, a: Budget, b: Budget, policy: str = DEFAULT_POLICY,
                 runtime: str = DEFAULT_RUNTIME, top: int = 10, seed: int = 0, engine: str = "auto",
                 counts: tuple | None = None) -> Churn:
    """Compare the runs under budgets a and b storage by storage. counts: each run's storage_counts
    (counters, arrays) where the caller has them (None: simulate both)."""
    compute = baseline(program).compute_ns
    if counts is None:
        counts = tuple(storage_counts(program, x.budget_bytes, policy, runtime, seed=seed, engine=engine)
                       for x in (a, b))
    (ca, xa), (cb, xb) = counts
    ra, rb = _side(a, ca, xa, compute), _side(b, cb, xb, compute)
    slower = "b" if rb.remat_ns >= ra.remat_ns else "a"
    slow = xb if slower == "b" else xa
    s_compute = storage_compute_ns(program)
    roots = program.storage_root
    order = np.lexsort((np.arange(program.n_storages), -slow["rematerializations"], -slow["policy_evictions"]))
    picks = [int(s) for s in order[:top] if slow["policy_evictions"][s] > 0]
    rows = tuple(StorageChurn(s, program.tensor_names[int(roots[s])], int(s_compute[s]),
                              int(xa["policy_evictions"][s]), int(xb["policy_evictions"][s]),
                              int(xa["policy_evictions"][s] + xa["eager_evictions"][s]),
                              int(xb["policy_evictions"][s] + xb["eager_evictions"][s]),
                              int(xa["rematerializations"][s]), int(xb["rematerializations"][s])) for s in picks)
    jac = Counts(jaccard(xa["policy_evictions"] + xa["eager_evictions"], xb["policy_evictions"] + xb["eager_evictions"]),
                 jaccard(xa["policy_evictions"], xb["policy_evictions"]))
    extra = abs(rb.remat_ns - ra.remat_ns)
    return Churn(ra, rb, jac, slower, extra, rows)
