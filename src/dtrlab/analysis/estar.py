"""Where the reference's incremental e* upkeep and a fresh traversal disagree, during one run.

The reference maintains each storage's evicted neighbourhood incrementally (absorb on eviction,
rebuild on rematerialization); parity follows it. This replays a run and, at every score,
also traverses afresh, counting the evaluations whose e* costs differ.
"""

from __future__ import annotations

import math

from dataclasses import asdict, dataclass

from ..sim.policies import DEFAULT_POLICY, NEIGHBORHOOD, get_policy
from ..sim.pyengine import Engine, _Region
from ..sim.runtimes import DEFAULT_RUNTIME, get_runtime
from ..sim.simulate import check_compatible
from ..trace.lower import Program


@dataclass(frozen=True)
class Disagreement:
    """One score evaluation whose incremental e* cost is not the fresh traversal's."""

    clock_ns: int
    storage: str
    incremental_forward_ns: int
    incremental_reverse_ns: int
    fresh_forward_ns: int
    fresh_reverse_ns: int


@dataclass(frozen=True)
class Drift:
    outcome: str
    clock_ns: int  # the replayed run's own figures: the same as `simulate` gives for it
    evictions: int
    evaluations: int
    differing: int
    lower: int  # evaluations where the incremental cost is below the fresh one
    higher: int
    first: Disagreement | None

    @property
    def fraction(self) -> float:
        return self.differing / self.evaluations if self.evaluations else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fraction"] = self.fraction
        return d


class _Probe(Engine):
    """The Python engine, traversing afresh beside every incremental e* it reads."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        score = self._score

        def probed(s):
            self._compare(s)
            return score(s)

        self._score = probed

    def _compare(self, s) -> None:
        fwd, rev = _Region(), _Region()
        self._traverse(s, True, fwd)
        self._traverse(s, False, rev)
        inc = (self.region_fwd[s].compute, self.region_rev[s].compute)
        fresh = (fwd.compute, rev.compute)
        self.evaluations += 1
        if inc != fresh:
            self.differing += 1
            total_inc, total_fresh = sum(inc), sum(fresh)
            self.lower += total_inc < total_fresh
            self.higher += total_inc > total_fresh
            if self.first is None:
                name = self.p.tensor_names[self.s_root[s]]
                self.first = Disagreement(self.clock, name, *inc, *fresh)


def neighborhood_drift(program: Program, budget_bytes: int, policy: str = DEFAULT_POLICY,
                        runtime: str = DEFAULT_RUNTIME, seed: int = 0) -> Drift:
    """Replay one run (the choices are the reference's) and count e* disagreements. It reads the
    Python engine's regions at every score, so it runs there whatever the engine asked for."""
    pol, rt = get_policy(policy), get_runtime(runtime)
    check_compatible(pol, rt)
    if NEIGHBORHOOD not in pol.needs or not rt.optimized:
        from ..errors import UsageError

        raise UsageError(f"policy {pol.name} on {rt.name} keeps no incremental e* to compare")
    probe = _Probe(program, budget_bytes, pol, rt, math.inf, seed)
    probe.evaluations = probe.differing = probe.lower = probe.higher = 0
    probe.first = None
    outcome = probe.run()
    return Drift(outcome, probe.clock, probe.evictions, probe.evaluations, probe.differing, probe.lower, probe.higher, probe.first)
