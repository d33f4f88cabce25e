"""Where two budgets' runs part ways: the first policy eviction that differs, and the score terms
of both runs' candidates at that choice (either engine's event log to find it, the Python engine to look)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import UsageError
from ..sim import pyengine
from ..sim.instruments import EVICT, Instruments
from ..sim.policies import DEFAULT_POLICY, FEATURE_FIELDS, get_policy
from ..sim.runtimes import DEFAULT_RUNTIME, get_runtime
from ..sim.simulate import check_compatible, simulate
from ..trace.lower import Program
from .scan import Budget


@dataclass(frozen=True)
class Terms:
    """A candidate's score terms in one run at its choice: the policy's features and score."""

    storage: int
    name: str
    in_pool: bool  # evictable at that moment (else the score is what it would be)
    compute_ns: int
    neighborhood_ns: int  # e* compute around it (the "neighbourhood" of the DTR score)
    size_bytes: int
    staleness_ns: float
    score: float
    features: dict = field(default_factory=dict, compare=False, repr=False)  # every feature, by name

    def shown(self) -> dict:
        """The candidate as the JSON shows it: DTR's terms and the score (every feature stays inside,
        for the mechanism's factors)."""
        return {k: v for k, v in self.__dict__.items() if k != "features"}


@dataclass(frozen=True)
class Choice:
    """What one run did at the divergent eviction: its clock, its choice, both candidates' terms."""

    budget: Budget
    clock_ns: int | None  # None: the run made no more policy evictions
    chosen: int | None
    memory_bytes: int | None
    candidates: tuple[Terms, ...]


@dataclass(frozen=True)
class Divergence:
    """index: how many policy evictions both runs shared before parting (None: never parted).
    evictions_a/_b: each run's policy evictions in all (None: the run was looked at only as far as
    the overhead cap let it go, which was far enough to find where it parts)."""

    index: int | None
    evictions_a: int | None
    evictions_b: int | None
    a: Choice | None
    b: Choice | None

    def to_dict(self) -> dict:
        def side(c: Choice | None):
            if c is None:
                return None
            return {"ratio": c.budget.ratio, "budget_bytes": c.budget.budget_bytes, "clock_ns": c.clock_ns,
                    "chosen": c.chosen, "memory_bytes": c.memory_bytes,
                    "candidates": [t.shown() for t in c.candidates]}
        return {"index": self.index, "evictions_a": self.evictions_a, "evictions_b": self.evictions_b,
                "a": side(self.a), "b": side(self.b)}


class _Stop(Exception):
    pass


class _AtChoice:
    """An observer that waits for the k-th policy choice, records the candidates' terms, and stops."""

    def __init__(self, k: int, candidates: list[int], names) -> None:
        self.k, self.candidates, self.names = k, candidates, names
        self.seen = 0
        self.result: tuple | None = None

    def on_choose(self, engine, best_s: int, best_score: float) -> None:
        if self.seen == self.k:
            terms = []
            for s in self.candidates:
                f = engine._features(s)
                terms.append(Terms(s, self.names[s], s in engine.pool, f.compute_ns, f.neighborhood_ns,
                                   f.size_bytes, f.staleness_ns, engine.policy.score(f),
                                   {name: getattr(f, attr) for name, attr in FEATURE_FIELDS.items()}))
            self.result = (engine.clock, best_s, engine.memory, tuple(terms))
            raise _Stop()
        self.seen += 1

    def __getattr__(self, name):  # the other hooks: nothing to do
        if name.startswith("on_"):
            return lambda *args: None
        raise AttributeError(name)


def policy_log(events) -> np.ndarray:
    """A run's policy evictions as rows [clock_ns, storage], from its EventLog."""
    log = events.rows(kind=EVICT)
    return np.stack([log.clock_ns, log.storage], axis=1)


def _policy_log(program: Program, budget_bytes: int, pol, rt, engine: str, seed: int) -> np.ndarray:
    res = simulate(program, budget_bytes, pol, rt, engine=engine, seed=seed,
                   instruments=Instruments(per_storage=False, events=True, oom_snapshot=False))
    return policy_log(res.observations.events)


def _look(program, budget: Budget, pol, rt, k: int, candidates: list[int], names, seed: int) -> Choice:
    obs = _AtChoice(k, candidates, names)
    engine = pyengine.Engine(program, budget.budget_bytes, pol, rt, math.inf, seed, obs)
    try:
        engine.run()
    except _Stop:
        pass
    if obs.result is None:
        return Choice(budget, None, None, None, ())
    clock, chosen, memory, terms = obs.result
    return Choice(budget, clock, chosen, memory, terms)


def _parting(la: np.ndarray, lb: np.ndarray, whole: tuple[bool, bool]) -> tuple[bool, int | None]:
    """(decided, k): k is the first policy eviction where the logs differ (None: never). A log that
    is not whole is a prefix of its run's, and decides only a difference inside it."""
    n = min(len(la), len(lb))
    differ = np.flatnonzero(la[:n, 1] != lb[:n, 1])
    if len(differ):
        return True, int(differ[0])
    short = [i for i, log in enumerate((la, lb)) if len(log) == n]
    if not all(whole[i] for i in short):  # a prefix ends before the runs are seen to part
        return False, None
    return True, (None if len(la) == len(lb) else n)  # else one run stops evicting where the other goes on


def diverge(program: Program, a: Budget, b: Budget, policy: str = DEFAULT_POLICY,
            runtime: str = DEFAULT_RUNTIME, engine: str = "auto", seed: int = 0,
            logs: tuple = (None, None), totals: tuple = (None, None)) -> Divergence:
    """The first policy eviction where runs a and b differ, and the score terms there; `engine`
    runs the two logs (simulate's choice), the terms always come from the Python engine. logs: the
    runs' policy_log, or its first rows, where the caller has them (None: run it, whole and
    unbounded); totals: the rows of each given log's whole run where known (None: not known, as of
    a run the overhead cap stopped). A log shorter than its total is run whole only when the
    parting is not inside it."""
    pol, rt = get_policy(policy), get_runtime(runtime)
    check_compatible(pol, rt)
    if pol.score is None:
        raise UsageError(f"policy {pol.name} chooses at random: there are no score terms to compare")

    def whole(x: Budget) -> tuple:
        log = _policy_log(program, x.budget_bytes, pol, rt, engine, seed)
        return log, len(log)
    sides = [whole(x) if log is None else (log, total) for x, log, total in zip((a, b), logs, totals)]
    decided, k = _parting(sides[0][0], sides[1][0], tuple(t == len(log) for log, t in sides))
    if not decided:  # a head ends before the runs are seen to part
        sides = [(log, t) if t == len(log) else whole(x) for x, (log, t) in zip((a, b), sides)]
        _, k = _parting(sides[0][0], sides[1][0], (True, True))
    (la, ta), (lb, tb) = sides
    if k is None:
        return Divergence(None, ta, tb, None, None)
    cands = sorted({int(log[k, 1]) for log in (la, lb) if k < len(log)})
    roots = program.storage_root
    names = {s: program.tensor_names[int(roots[s])] for s in cands}
    return Divergence(k, ta, tb, _look(program, a, pol, rt, k, cands, names, seed),
                      _look(program, b, pol, rt, k, cands, names, seed))
