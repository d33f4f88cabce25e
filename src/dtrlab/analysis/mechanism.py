"""Mechanisms: the same few figures on the two runs of every regime switch and feasibility inversion,
and which pathology they show (churn, frontier, both, neither) by the rules stated here once.

Owns RunSide, Signature, the classification thresholds and rules, and `flipped_by` (which score term
turned the first divergent decision). The figures come from churn (counts), oom (snapshot) and divergence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import UsageError
from ..sim import formula as fm
from ..sim.instruments import LOCKED, PINNED_CONSTANT, PINNED_OUTPUT
from ..sim.policies import DEFAULT_POLICY, get_policy
from ..sim.result import OOM
from .churn import jaccard
from .oom import OomReport

SWITCH, INVERSION = "switch", "inversion"
CHURN, FRONTIER, BOTH, NEITHER = "churn", "frontier", "both", "neither"
KINDS = (CHURN, FRONTIER, BOTH, NEITHER)

# The rules' thresholds, justified from the data in docs/diagnostics.md ("Mechanisms").
# Churn: the unstable run evicts each evicted storage at least this many times as often as the
# reference run does...
CHURN_RATE_MIN = 2.0
# ... and the two runs evict (nearly) the same storages: the Jaccard index of the evicted sets.
CHURN_JACCARD_MIN = 0.9
# Frontier: at the OOM the pool is empty, pinned + locked + the next compute's need exceed the
# budget, and the stack holds at least this many pending rematerializations (a recursive frontier).
FRONTIER_MIN_REMATS = 1

# Which factor of the policy's own score turned the first divergent decision, by what it measures
# (DTR's score (compute + e*) / (size x staleness) has the three: e*, size, timing).
TIMING, ESTAR, SIZE = "timing", "e*", "size"
AVAILABILITY = "availability"  # a candidate one run chose could not be evicted in the other then
STOPPED = "stopped"  # one run makes no more policy evictions where the other goes on


@dataclass(frozen=True)
class RunSide:
    """One run's mechanism figures. The inside figures (depth, shares, over_budget) are those of
    its worst moment, the OOM of a failing run; `inside` says where they come from, or why absent."""

    ratio: float | None
    budget_bytes: int
    outcome: str
    overhead: float | None  # run_overhead: None for a run that did not finish
    evictions: int  # all: the policy's and the eager ones at last release
    distinct_evicted: int
    per_evicted_storage: float
    pool_empty: bool  # ended with nothing evictable (the engine stops with an OOM exactly then)
    depth: int | None = None  # pending (re)computations on the stack at the worst moment
    remats: int | None = None  # of them, rematerializations
    pinned_share: float | None = None  # of the resident bytes then
    locked_share: float | None = None
    over_budget: bool | None = None  # pinned + locked + the next compute's need > budget
    inside: str = "not measured"

    @property
    def label(self) -> str:
        return f"{self.ratio:g}" if self.ratio is not None else f"{self.budget_bytes} B"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Signature:
    """An instability's two runs: `reference` (a switch's fast run, an inversion's last feasible one)
    and `unstable` (the slow run, the first infeasible one), their churn, their first divergence."""

    trace: str
    kind: str  # SWITCH or INVERSION
    reference: RunSide
    unstable: RunSide
    factor: float | None  # a switch's overhead factor
    jaccard: float  # of the two runs' evicted sets (all evictions)
    divergence_index: int | None  # policy evictions shared before they part (None: never, or not looked at)
    flipped_by: str | None  # TIMING, ESTAR, SIZE, AVAILABILITY, STOPPED; None: they never part
    mechanism: str

    @property
    def label(self) -> str:
        return f"{self.reference.label}/{self.unstable.label}"

    @property
    def churn_rate(self) -> float:
        """Unstable run's evictions per evicted storage over the reference run's."""
        ref = self.reference.per_evicted_storage
        return self.unstable.per_evicted_storage / ref if ref else math.inf

    def to_dict(self) -> dict:
        return {"trace": self.trace, "kind": self.kind, "pair": self.label, "mechanism": self.mechanism,
                "factor": self.factor, "churn_rate": self.churn_rate if math.isfinite(self.churn_rate) else None,
                "jaccard": self.jaccard, "divergence_index": self.divergence_index, "flipped_by": self.flipped_by,
                "reference": self.reference.to_dict(), "unstable": self.unstable.to_dict()}


def is_churn(churn_rate: float, jaccard: float) -> bool:
    """The same storages evicted again and again: CHURN_RATE_MIN x the re-evictions, sets alike."""
    return churn_rate >= CHURN_RATE_MIN and jaccard >= CHURN_JACCARD_MIN


def is_frontier(side: RunSide) -> bool:
    """The pool exhausted under a recursive pinned and locked stack that does not fit the budget."""
    return bool(side.pool_empty and side.over_budget and (side.remats or 0) >= FRONTIER_MIN_REMATS)


def classify(churn_rate: float, jaccard: float, unstable: RunSide) -> str:
    churn, frontier = is_churn(churn_rate, jaccard), is_frontier(unstable)
    return BOTH if churn and frontier else CHURN if churn else FRONTIER if frontier else NEITHER


def evictions_of(arrays: dict) -> np.ndarray:
    """All evictions of each storage (policy + eager), from per-storage counts."""
    return np.asarray(arrays["policy_evictions"]) + np.asarray(arrays["eager_evictions"])


def run_side(run, evictions: np.ndarray, oom: OomReport | str | None = None, deepest: dict | None = None) -> RunSide:
    """A run's figures: `run` has ratio, budget_bytes, outcome, overhead; `evictions` its counts by
    storage; `oom` its explained OOM, or why it was not explained (for an OOM run); `deepest` the
    worst_moment of a run that finished, or None."""
    n, d = int(evictions.sum()), int(np.count_nonzero(evictions))
    base = dict(ratio=run.ratio, budget_bytes=int(run.budget_bytes), outcome=run.outcome, overhead=run.overhead,
                evictions=n, distinct_evicted=d, per_evicted_storage=n / d if d else 0.0,
                pool_empty=run.outcome == OOM)
    if isinstance(oom, OomReport):
        resident = sum(h.size_bytes for h in oom.holders) or 1
        pinned = sum(h.size_bytes for h in oom.holders if h.reason in (PINNED_CONSTANT, PINNED_OUTPUT))
        locked = sum(h.size_bytes for h in oom.holders if h.reason == LOCKED)
        return RunSide(**base | dict(pool_empty=oom.pool_empty), depth=len(oom.frames),
                       remats=sum(f.remat for f in oom.frames), pinned_share=pinned / resident,
                       locked_share=locked / resident, over_budget=oom.frontier_exceeds_budget,
                       inside="oom snapshot")
    if run.outcome != OOM:
        # A run that never ran out: its pool was never empty when it needed memory, so no frontier
        # filled its budget. Its worst moment, when the log is given, is its deepest stack.
        if deepest is None:
            return RunSide(**base, over_budget=False, inside="no OOM: the pool never ran empty")
        return RunSide(**base, **deepest, over_budget=False, inside="event log (deepest stack)")
    return RunSide(**base, inside=oom or "not measured")


def worst_moment(log) -> dict:
    """A finished run's deepest moment in its EventLog: the first compute or rematerialization of the
    greatest stack depth. depth: frames pending then (its frame and those below it), remats: the
    nested rematerializations above the schedule's own step (depth column), shares of resident bytes."""
    steps = np.flatnonzero(log.depth >= 0)
    if not len(steps):
        return dict(depth=0, remats=0, pinned_share=None, locked_share=None)
    k = int(steps[np.argmax(log.depth[steps])])
    resident = int(log.memory_bytes[k])
    share = (lambda b: int(b) / resident) if resident else (lambda b: None)
    return dict(depth=int(log.depth[k]) + 1, remats=int(log.depth[k]), pinned_share=share(log.pinned_bytes[k]),
                locked_share=share(log.locked_bytes[k]))


def _log(x: float) -> float | None:
    return math.log(x) if x > 0 else None


def _factor_name(factor: fm.Formula) -> str:
    """A factor by what it measures: timing (it reads staleness), e*, size, else its own text."""
    reads = factor.features
    if reads & {"staleness", "fresh_staleness", "last_access"}:
        return TIMING
    if reads & {"estar", "fresh_estar", "eqclass", "ancestors"}:
        return ESTAR
    return SIZE if reads == {"size"} else factor.text.removeprefix("score: ")


def score_factors(policy: str = DEFAULT_POLICY) -> list[tuple[str, object, int]]:
    """(name, value of a candidate's Terms, sign) for each factor of the policy's own score."""
    formula = get_policy(policy).formula
    if formula is None or formula.is_random:
        raise UsageError(f"policy {policy}: its score is no formula, so no term can be named")
    return [(_factor_name(f), lambda t, f=f: fm.evaluate(f, t.features), sign) for f, sign in fm.factors(formula)]


def flipped_by(divergence, policy: str = DEFAULT_POLICY) -> str | None:
    """The term of DTR's score whose change between the two runs turned the first divergent choice.

    Run a chose x where run b chose y: log(score x / score y) rose from <= 0 to >= 0. Each factor's
    share of the rise is the change of its log ratio between the candidates (with the sign it has in
    the score); the largest share names the term. Compute and size are a storage's own and do not
    change between runs, so the rise is timing (staleness) or e* unless a candidate was not evictable."""
    d = divergence
    if d is None or d.index is None:
        return None
    if d.a is None or d.b is None or d.a.chosen is None or d.b.chosen is None:
        return STOPPED
    x, y = d.a.chosen, d.b.chosen
    ta, tb = ({t.storage: t for t in c.candidates} for c in (d.a, d.b))
    if not all(t.in_pool for t in (ta[x], ta[y], tb[x], tb[y])):
        return AVAILABILITY
    rise = {}
    for name, get, sign in score_factors(policy):
        la = [_log(get(ta[s])) for s in (x, y)]
        lb = [_log(get(tb[s])) for s in (x, y)]
        if None in la or None in lb:  # a zero term: it decides when it changed, else not at all
            rise[name] = math.inf if (get(ta[x]), get(ta[y])) != (get(tb[x]), get(tb[y])) else 0.0
        else:
            rise[name] = sign * ((lb[0] - lb[1]) - (la[0] - la[1]))
    return max(rise, key=lambda k: rise[k])


def signature(trace: str, kind: str, reference: RunSide, unstable: RunSide, evictions_ref: np.ndarray,
              evictions_unstable: np.ndarray, divergence, factor: float | None = None,
              policy: str = DEFAULT_POLICY) -> Signature:
    """Put one instability's figures together and classify it."""
    jac = jaccard(evictions_ref, evictions_unstable)
    ref = reference.per_evicted_storage
    rate = unstable.per_evicted_storage / ref if ref else math.inf
    return Signature(trace, kind, reference, unstable, factor, jac,
                     None if divergence is None else divergence.index, flipped_by(divergence, policy),
                     classify(rate, jac, unstable))


def pairs_of(switches, inversions) -> list[tuple[str, object, object, float | None]]:
    """(kind, reference run, unstable run, factor) of every switch and inversion, by budget."""
    out = [(SWITCH, s.fast, s.slow, s.factor) for s in switches]
    out += [(INVERSION, i.last_feasible, i.infeasible[0], None) for i in inversions]
    return sorted(out, key=lambda p: (min(p[1].budget_bytes, p[2].budget_bytes), p[0]))


# The mechanisms table, as `scan --mechanisms` prints it and the report shows it.
MECHANISM_COLUMNS = ("trace", "kind", "runs", "outcomes", "factor", "evictions per evicted storage", "churn rate",
                     "jaccard", "pool empty", "depth (remats)", "pinned / locked share", "over budget",
                     "first divergence", "flipped by", "mechanism")


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def mechanism_row(s: Signature) -> tuple[str, ...]:
    """One Signature as the table's text, in MECHANISM_COLUMNS order."""
    r, u = s.reference, s.unstable
    depth = "-" if u.depth is None else f"{u.depth} ({u.remats})"
    shares = "-" if u.pinned_share is None else f"{_share(u.pinned_share)} / {_share(u.locked_share)}"
    over = "-" if u.over_budget is None else ("yes" if u.over_budget else "no")
    return (s.trace, s.kind, s.label, f"{r.outcome}/{u.outcome}", "-" if s.factor is None else f"{s.factor:.2f}x",
            f"{r.per_evicted_storage:.2f} -> {u.per_evicted_storage:.2f}",
            f"{s.churn_rate:.2f}" if math.isfinite(s.churn_rate) else "inf", f"{s.jaccard:.3f}",
            "yes" if u.pool_empty else "no", depth, shares, over,
            "-" if s.divergence_index is None else f"{s.divergence_index:,}", s.flipped_by or "-", s.mechanism)


def counts_table(signatures) -> dict[str, dict[str, int]]:
    """trace -> {kind of instability -> how many}, every mechanism present (zeros included)."""
    out: dict[str, dict[str, int]] = {}
    for s in signatures:
        row = out.setdefault(s.trace, {k: 0 for k in KINDS})
        row[s.mechanism] += 1
    return out


def measure(program, switches, inversions, policy: str, runtime: str,
            overhead_limit: float | None = None) -> list[Signature]:
    """Every switch's and inversion's Signature, simulating what it needs: per-storage counts on the
    compiled engine, each OOM replayed on the Python engine, the first divergence (compiled to find it)."""
    from ..errors import UsageError
    from .churn import storage_counts
    from .divergence import diverge
    from .oom import explain_oom
    from .scan import Budget

    def counts(run):
        return evictions_of(storage_counts(program, run.budget_bytes, policy, runtime, overhead_limit)[1])

    def divergence(a, b):
        try:
            return diverge(program, Budget(a.ratio, a.budget_bytes), Budget(b.ratio, b.budget_bytes), policy, runtime)
        except UsageError:  # no compiled engine, or a policy without score terms
            return None

    return mechanisms(program, pairs_of(switches, inversions), policy, runtime, counts=counts,
                      explain=lambda run: explain_oom(program, run.budget_bytes, policy, runtime),
                      divergence=divergence,
                      deepest=lambda run: worst_moment(event_log(program, run.budget_bytes, policy, runtime,
                                                                 overhead_limit)))


def event_log(program, budget_bytes: int, policy: str, runtime: str, overhead_limit: float | None = None):
    """The run's EventLog (the compiled engine's when it runs the policy, else the Python engine's)."""
    from ..sim.instruments import Instruments
    from ..sim.simulate import simulate

    res = simulate(program, budget_bytes, policy, runtime, overhead_limit=overhead_limit,
                   instruments=Instruments(per_storage=False, events=True, oom_snapshot=False))
    return res.observations.events


def mechanisms(program, runs_pairs, policy: str, runtime: str, *, counts: Callable, explain: Callable,
               divergence: Callable, deepest: Callable = lambda run: None) -> list[Signature]:
    """The Signature of each (kind, reference, unstable, factor) of `runs_pairs` on `program`.

    counts(run) -> evictions by storage; explain(run) -> OomReport or why not (OOM runs only);
    deepest(run) -> worst_moment of a finished unstable run, or None; divergence(reference, unstable)
    -> Divergence or None. The callers decide how runs are simulated (directly, or through a memo)."""
    out = []
    for kind, ref, bad, factor in runs_pairs:
        er, eu = counts(ref), counts(bad)
        sides = [run_side(ref, er, explain(ref) if ref.outcome == OOM else None),
                 run_side(bad, eu, explain(bad) if bad.outcome == OOM else None,
                          deepest(bad) if bad.outcome != OOM else None)]
        out.append(signature(program.name, kind, sides[0], sides[1], er, eu, divergence(ref, bad), factor, policy))
    return out
