"""Eviction policies: the score of each storage, the registry, and the DTR authors' ablations.

A policy scores a resident, unlocked storage from its features; the engine evicts the lowest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..errors import UsageError

INF = math.inf

# What a score may ask for beyond the always-present features (see StorageFeatures):
NEIGHBORHOOD = "regions"  # e* cost, maintained incrementally by an optimized runtime
EQ_CLASS = "eq_class"  # equivalence-class cost, maintained by an optimized runtime
FRESH_NEIGHBORHOOD = "fresh_regions"  # e* cost and staleness by a fresh traversal each time


@dataclass(frozen=True)
class StorageFeatures:
    """What a policy's score sees of one candidate storage (all integers, times in ns).

    compute_ns: cost of the operators that produce the storage's tensors.
    size_bytes: the storage's size.
    staleness_ns: clock minus the last time the storage was an input (may be inf before any use).
    neighborhood_ns: e* cost, compute of the evicted storages reachable through evicted
        storages in both directions, as the incremental bookkeeping holds it (needs NEIGHBORHOOD).
    ancestors_ns: the reverse half of neighborhood_ns: evicted storages reached through inputs.
    eq_class_ns: compute of the distinct evicted equivalence classes next to it (needs EQ_CLASS).
    fresh_neighborhood_ns / fresh_staleness_ns: the same from a fresh traversal, staleness taken
        from the most recently used member (needs FRESH_NEIGHBORHOOD).
    last_access_ns, clock_ns: the raw timestamps.
    """

    compute_ns: int
    size_bytes: int
    staleness_ns: int | float
    last_access_ns: int | float
    clock_ns: int
    neighborhood_ns: int = 0
    ancestors_ns: int = 0
    eq_class_ns: int = 0
    fresh_neighborhood_ns: int = 0
    fresh_staleness_ns: int | float = 0


Score = Callable[[StorageFeatures], float]


@dataclass(frozen=True)
class Policy:
    """An eviction policy: a score over StorageFeatures (lower is evicted first), or random."""

    name: str
    score: Score | None  # None: random choice
    needs: frozenset[str] = frozenset()
    reference: str | None = None  # the reference simulator's class name
    description: str = ""
    builtin: bool = False

    @property
    def is_random(self) -> bool:
        return self.score is None


def _q(num, den):
    """The reference's quotient: correctly rounded, inf when the denominator is not positive."""
    return num / den if den > 0 else INF


# The scores of the built-in policies, written over StorageFeatures.
def _dtr(f):
    return _q(f.compute_ns + f.neighborhood_ns, f.size_bytes * f.staleness_ns)


def _dtr_eq(f):
    return _q(f.compute_ns + f.eq_class_ns, f.size_bytes * f.staleness_ns)


def _dtr_local(f):
    return _q(f.compute_ns, f.size_bytes * f.staleness_ns)


def _dtr_unopt(f):
    return _q(f.compute_ns + f.fresh_neighborhood_ns, f.size_bytes * f.fresh_staleness_ns)


def _dtr_fresh(f):
    return _q(f.compute_ns + f.fresh_neighborhood_ns, f.size_bytes * f.staleness_ns)


def _msps(f):  # compute over size, counting only the evicted ancestors (reverse e*)
    return _q(f.compute_ns + f.ancestors_ns, f.size_bytes)


def _lru(f):
    return f.last_access_ns


def _size(f):
    return _q(1, f.size_bytes)


_BASE_COST = {"e": ("e*", NEIGHBORHOOD), "eq": ("equivalence class", EQ_CLASS),
              "local": ("local", None), "none": ("no cost", None)}


def _ablation(cost: str, size: bool, stale: bool) -> Score:
    def score(f: StorageFeatures):
        if cost == "e":
            num = f.compute_ns + f.neighborhood_ns
        elif cost == "eq":
            num = f.compute_ns + f.eq_class_ns
        elif cost == "local":
            num = f.compute_ns
        else:
            num = 1
        if not size and not stale:
            return num
        den = (f.size_bytes if size else 1) * (f.staleness_ns if stale else 1)
        return _q(num, den)

    return score


POLICIES: dict[str, Policy] = {}
_ALIASES: dict[str, str] = {}


def register_policy(name: str, score: Score | None, needs: frozenset[str] | set[str] = frozenset(),
                    *, reference: str | None = None, description: str = "",
                    builtin: bool = False, replace: bool = False) -> Policy:
    """Add a policy to the registry; `dtrlab simulate --policy NAME` and sweeps can then use it.

    A user's policy is a function of StorageFeatures returning a number (lower = evict first;
    ties go to the last candidate in pool order; a score of exactly 0 stops the scan).
    It runs on the pure-Python engine.
    """
    key = name.lower()
    if not replace and (key in POLICIES or key in _ALIASES):
        raise UsageError(f"policy {name!r} is already registered")
    unknown = set(needs) - {NEIGHBORHOOD, EQ_CLASS, FRESH_NEIGHBORHOOD}
    if unknown:
        raise UsageError(f"policy {name!r} needs unknown features {sorted(unknown)}")
    policy = Policy(key, score, frozenset(needs), reference, description, builtin)
    POLICIES[key] = policy
    if reference:
        _ALIASES[reference.lower()] = key
    return policy


def _register_builtins() -> None:
    base = [
        ("dtr", _dtr, {NEIGHBORHOOD}, "DTR", "e* cost / (size x staleness): the DTR heuristic"),
        ("dtr-eq", _dtr_eq, {EQ_CLASS}, "DTREqClass", "equivalence-class cost / (size x staleness)"),
        ("dtr-local", _dtr_local, set(), "DTRLocal", "own cost / (size x staleness)"),
        ("dtr-unopt", _dtr_unopt, {FRESH_NEIGHBORHOOD}, "DTRUnopt",
         "e* by a fresh traversal each time / (size x neighbourhood staleness)"),
        ("msps", _msps, {NEIGHBORHOOD}, "MSPS", "cost with evicted ancestors / size"),
        ("dtr-fresh", _dtr_fresh, {FRESH_NEIGHBORHOOD}, None,
         "DTR with e* by a fresh traversal each time (not the reference's incremental upkeep)"),
        ("lru", _lru, set(), "LRU", "least recently used"),
        ("size", _size, set(), "LargestStorage", "largest storage first"),
    ]
    for name, score, needs, ref, desc in base:
        register_policy(name, score, needs, reference=ref, description=desc, builtin=True)
    register_policy("random", None, reference="RandomStorage", description="uniform over the pool (seeded)",
                    builtin=True)
    # The sixteen ablations: cost term x size term x staleness term.
    ref_cost = {"e": "E", "eq": "Eq", "local": "Local", "none": ""}
    for cost in ("e", "eq", "local", "none"):
        for size in (True, False):
            for stale in (True, False):
                parts = [cost] + (["size"] if size else []) + (["stale"] if stale else [])
                name = "ab-" + "-".join(parts)
                ref = "Ab" + ref_cost[cost] + ("Size" if size else "") + ("Stale" if stale else "")
                if ref == "Ab":
                    ref = "AbRandom"
                label, need = _BASE_COST[cost]
                desc = f"ablation: {label}, {'size' if size else 'no size'}, {'staleness' if stale else 'no staleness'}"
                if cost == "none" and not size and not stale:
                    register_policy(name, None, reference=ref, description=desc + " (random)",
                                    builtin=True)
                else:
                    register_policy(name, _ablation(cost, size, stale), {need} if need else set(),
                                    reference=ref, description=desc, builtin=True)


_register_builtins()

DEFAULT_POLICY = "dtr"


def get_policy(name: str | Policy) -> Policy:
    if isinstance(name, Policy):
        return name
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    policy = POLICIES.get(key)
    if policy is None:
        raise UsageError(f"unknown policy {name!r} (known: {', '.join(POLICIES)}, or the reference class names)")
    return policy


def ablation_policies() -> list[Policy]:
    return [p for p in POLICIES.values() if p.name.startswith("ab-")]
