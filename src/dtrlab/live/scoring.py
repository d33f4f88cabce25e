"""What the live runtime evicts: the simulator's policies, scored on the live graph's storages.

Owns the features of a live storage (formula.FEATURES, read off graph.Storage); the score is the
policy's own (`Policy.score`), the scan the engine's (`pyengine.scan_pool`), the random choice its
splitmix stream. e* and the equivalence class are traversed fresh at each score (the engine keeps
them incrementally; docs/live.md says where the two differ).
"""

from __future__ import annotations

from ..errors import UsageError
from ..sim.policies import EQ_CLASS, FRESH_NEIGHBORHOOD, NEIGHBORHOOD, Policy, StorageFeatures, get_policy
from ..sim.pyengine import _SplitMix, scan_pool
from .graph import Storage


def _region(base: Storage, forward: bool) -> list[Storage]:
    """The evicted storages reachable from `base` through evicted storages, in one direction."""
    seen: dict[int, Storage] = {}
    stack = [base]
    while stack:
        s = stack.pop()
        for u in (s.children if forward else s.parents).values():
            if not u.resident and not u.constant and u.id not in seen:
                seen[u.id] = u
                stack.append(u)
    return list(seen.values())


def _component(start: Storage) -> list[Storage]:
    """The evicted storages connected to an evicted `start` through evicted storages, both ways."""
    seen = {start.id: start}
    stack = [start]
    while stack:
        s = stack.pop()
        for u in (*s.children.values(), *s.parents.values()):
            if not u.resident and not u.constant and u.id not in seen:
                seen[u.id] = u
                stack.append(u)
    return list(seen.values())


def _eq_class_ns(s: Storage) -> int:
    """Compute of the distinct evicted classes next to `s` (a class: a connected evicted region)."""
    counted: set[int] = set()
    total = 0
    for u in (*s.children.values(), *s.parents.values()):
        if u.resident or u.constant or u.id in counted:
            continue
        members = _component(u)
        counted.update(m.id for m in members)
        total += sum(m.compute_ns for m in members)
    return total


def features(s: Storage, needs: frozenset[str], clock_ns: int, budget_bytes, resident_bytes: int) -> StorageFeatures:
    """The storage's features now, as the engine gives them to a score (only the upkeep `needs` asks)."""
    nb = anc = eq = fresh = 0
    fresh_stale = 0
    if NEIGHBORHOOD in needs or FRESH_NEIGHBORHOOD in needs:
        fwd, rev = _region(s, True), _region(s, False)
        anc = sum(u.compute_ns for u in rev)
        nb = sum(u.compute_ns for u in fwd) + anc
        members = {u.id: u for u in (*fwd, *rev)}.values()
        fresh = sum(u.compute_ns for u in members)
        fresh_stale = clock_ns - max([s.last_access_ns, *(u.last_access_ns for u in members)])
    if EQ_CLASS in needs:
        eq = _eq_class_ns(s)
    return StorageFeatures(s.compute_ns, s.nbytes, clock_ns - s.last_access_ns, s.last_access_ns, clock_ns,
                           nb, anc, eq, fresh, fresh_stale, s.evictions, s.remats, budget_bytes, resident_bytes)


class Chooser:
    """A policy choosing among the live pool (in its order); counts the scores it evaluated."""

    def __init__(self, policy: str | Policy, seed: int = 0) -> None:
        self.policy = get_policy(policy)
        self._rng = _SplitMix(seed)
        self.score_evals = 0

    def choose(self, pool: list[Storage], clock_ns: int, budget_bytes, resident_bytes: int) -> Storage:
        if self.policy.is_random:
            self.score_evals += 1
            return pool[self._rng.below(len(pool))]
        needs, score = self.policy.needs, self.policy.score

        def of(s: Storage):
            return score(features(s, needs, clock_ns, budget_bytes, resident_bytes))

        try:
            best, _, evals = scan_pool(pool, of)
        except OverflowError:
            raise UsageError(f"policy {self.policy.name}: a score is too large for a float "
                             f"(at clock {clock_ns})") from None
        self.score_evals += evals
        return best
