"""Eviction policies: the score of each storage, the registry, and the DTR authors' ablations.

A policy scores a resident, unlocked storage from its features; the engine evicts the lowest.
Every built-in is a formula of the score language (formula.py), defined once here.
"""

from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass
from typing import Callable

from ..errors import UsageError
from . import formula as fm
from .formula import EQ_CLASS, FRESH_NEIGHBORHOOD, HISTORY, NEIGHBORHOOD, Formula  # noqa: F401 (re-exported)

INF = math.inf


@dataclass(frozen=True)
class StorageFeatures:
    """What a policy's score sees of one candidate storage (integers, times in ns); the fields
    are the formula language's features (see formula.FEATURES and FEATURE_FIELDS).

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
    evictions / remats: the storage's policy evictions and rematerializations so far (HISTORY).
    budget_bytes / resident_bytes: the run's budget and the bytes in memory now.
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
    evictions: int = 0
    remats: int = 0
    budget_bytes: int | float = INF
    resident_bytes: int = 0


# formula feature -> StorageFeatures field
FEATURE_FIELDS = {
    "compute": "compute_ns", "size": "size_bytes", "staleness": "staleness_ns", "estar": "neighborhood_ns",
    "ancestors": "ancestors_ns", "eqclass": "eq_class_ns", "fresh_estar": "fresh_neighborhood_ns",
    "fresh_staleness": "fresh_staleness_ns", "last_access": "last_access_ns", "clock": "clock_ns",
    "evictions": "evictions", "remats": "remats", "budget": "budget_bytes", "resident": "resident_bytes",
}
assert set(FEATURE_FIELDS) == set(fm.FEATURES), "every feature of the language has a field"

Score = Callable[[StorageFeatures], float]


@dataclass(frozen=True)
class Policy:
    """An eviction policy: a formula (data: both engines evaluate it), or a user's Python
    function over StorageFeatures (the Python engine only). Lower scores are evicted first.

    score: the score over StorageFeatures (derived from the formula; None: the random choice).
    """

    name: str
    score: Score | None
    needs: frozenset[str] = frozenset()
    reference: str | None = None  # the reference simulator's class name
    description: str = ""
    builtin: bool = False
    formula: Formula | None = None  # None: `score` is a Python function

    @property
    def is_random(self) -> bool:
        return self.score is None

    @property
    def text(self) -> str | None:
        """The formula's canonical text (None for a Python function)."""
        return None if self.formula is None else self.formula.text


def policy_key(policy: Policy) -> str:
    """What identifies a policy's meaning in stored results: its formula's canonical text, so
    two formulas under one name never share rows. A Python function has no text that other
    processes could rebuild it from: its key is `python:NAME`."""
    return policy.formula.text if policy.formula is not None else f"python:{policy.name}"


def _features_score(formula: Formula) -> Score | None:
    """The formula as a function over StorageFeatures (the analyses' view of a score)."""
    if formula.is_random:
        return None
    source = fm.python_source(formula, {f: f"f.{FEATURE_FIELDS[f]}" for f in formula.features})
    return eval(f"lambda f: {source}", dict(fm.NAMESPACE))  # noqa: S307 - our own generated text


def formula_policy(text: str | Formula, name: str | None = None, *, reference: str | None = None,
                   description: str = "", builtin: bool = False) -> Policy:
    """A policy from a formula (text or parsed); unnamed, it is named by its canonical text."""
    formula = fm.parse(text) if isinstance(text, str) else text
    return Policy((name or formula.text), _features_score(formula), formula.needs, reference, description,
                  builtin, formula)


# The built-in policies, each defined once, in the score language. `/` is the reference's
# quotient: correctly rounded, inf when the denominator is not positive.
_BUILTINS = [
    ("dtr", "score: (compute + estar) / (size * staleness)", "DTR",
     "e* cost / (size x staleness): the DTR heuristic"),
    ("dtr-eq", "score: (compute + eqclass) / (size * staleness)", "DTREqClass",
     "equivalence-class cost / (size x staleness)"),
    ("dtr-local", "score: compute / (size * staleness)", "DTRLocal", "own cost / (size x staleness)"),
    ("dtr-unopt", "score: (compute + fresh_estar) / (size * fresh_staleness)", "DTRUnopt",
     "e* by a fresh traversal each time / (size x neighbourhood staleness)"),
    ("msps", "score: (compute + ancestors) / size", "MSPS", "cost with evicted ancestors / size"),
    ("dtr-fresh", "score: (compute + fresh_estar) / (size * staleness)", None,
     "DTR with e* by a fresh traversal each time (not the reference's incremental upkeep)"),
    ("lru", "score: last_access", "LRU", "least recently used"),
    ("size", "score: 1 / size", "LargestStorage", "largest storage first"),
    ("random", "random", "RandomStorage", "uniform over the pool (seeded)"),
]
# Remedies for the study's pathologies (the LSTM's regime switches, the ResNet-32 feasibility
# inversion): DTR's score changed in one idea each, chosen by `dtrlab rank` on the public traces
# (docs/policies.md has their leaderboard and what each does to each pathology).
_REMEDIES = [
    ("dtr-ancestors-sq", "score: (compute + ancestors) ** 2 / (size * staleness)",
     "DTR's cost cut to its ancestor half of e* (what rematerializing it needs first), squared"),
    ("dtr-ancestors", "score: (compute + ancestors) / (size * staleness)",
     "DTR's cost cut to its ancestor half of e* (msps's cost over DTR's denominator)"),
    ("dtr-cost-sq", "score: (compute + estar) ** 2 / (size * staleness)",
     "DTR with its cost squared: recompute cost outweighs size x staleness"),
]
REMEDY_POLICIES = tuple(name for name, *_ in _REMEDIES)
# The sixteen ablations: cost term x size term x staleness term (no term at all: random).
_ABLATION_COST = {"e": ("compute + estar", "E", "e*"), "eq": ("compute + eqclass", "Eq", "equivalence class"),
                  "local": ("compute", "Local", "local"), "none": ("1", "", "no cost")}


def _ablation_formula(cost: str, size: bool, stale: bool) -> str:
    num = _ABLATION_COST[cost][0]
    den = " * ".join((["size"] if size else []) + (["staleness"] if stale else []))
    if not den:
        return "random" if cost == "none" else f"score: {num}"
    num = f"({num})" if "+" in num else num
    return f"score: {num} / {f'({den})' if '*' in den else den}"


def _ablations():
    for cost, (_, ref_cost, label) in _ABLATION_COST.items():
        for size in (True, False):
            for stale in (True, False):
                name = "ab-" + "-".join([cost] + (["size"] if size else []) + (["stale"] if stale else []))
                ref = "Ab" + ref_cost + ("Size" if size else "") + ("Stale" if stale else "")
                desc = (f"ablation: {label}, {'size' if size else 'no size'}, "
                        f"{'staleness' if stale else 'no staleness'}")
                if ref == "Ab":
                    ref, desc = "AbRandom", desc + " (random)"
                yield name, _ablation_formula(cost, size, stale), ref, desc


POLICIES: dict[str, Policy] = {}
_ALIASES: dict[str, str] = {}
# What a sweep calls the optimal solver among its policies (dtrlab.optimal.defaults.OPTIMAL_POLICY, which
# this layer cannot import); no eviction policy takes the name, and asking for it here says where it is.
SOLVER_NAME = "optimal"


def register_policy(name: str, score: str | Formula | Score | None,
                    needs: frozenset[str] | set[str] = frozenset(), *, reference: str | None = None,
                    description: str = "", builtin: bool = False, replace: bool = False) -> Policy:
    """Add a policy to the registry; `dtrlab simulate --policy NAME` and sweeps can then use it.

    `score` is a formula (`"score: (compute + estar) / (size * staleness)"`: both engines run it,
    and its needs follow from its features), or a Python function of StorageFeatures returning a
    number, with the upkeep it reads declared in `needs` (it runs on the Python engine, in this
    process only). Lower = evict first; ties go to the last candidate in pool order; a score of
    exactly 0 stops the scan.
    """
    key = name.lower()
    if not replace and (key in POLICIES or key in _ALIASES):
        raise UsageError(f"policy {name!r} is already registered")
    if isinstance(score, (str, Formula)):
        policy = formula_policy(score, key, reference=reference, description=description, builtin=builtin)
    else:
        unknown = set(needs) - set(fm.NEEDS)
        if unknown:
            raise UsageError(f"policy {name!r} needs unknown features {sorted(unknown)}")
        policy = Policy(key, score, frozenset(needs), reference, description, builtin)
    POLICIES[key] = policy
    if reference:
        _ALIASES[reference.lower()] = key
    return policy


def registered_formulas() -> dict[str, tuple[str, str]]:
    """name -> (formula text, description) of each formula policy registered in this process beyond
    the built-ins: what another process registers to know them by name (report.pool's workers)."""
    return {k: (p.formula.text, p.description) for k, p in POLICIES.items()
            if not p.builtin and p.formula is not None}


def _register_builtins() -> None:
    for name, text, ref, desc in [*_BUILTINS, *_ablations()]:
        register_policy(name, text, reference=ref, description=desc, builtin=True)
    for name, text, desc in _REMEDIES:
        register_policy(name, text, description=desc, builtin=True)


_register_builtins()

from ..defaults import DEFAULT_POLICY  # noqa: F401 - re-exported: one definition, in defaults


def is_reserved(name: str) -> bool:
    """Whether `name` is a built-in policy's name or reference name (a user's policy may not take it)."""
    key = name.strip().lower()
    return key in _ALIASES or (key in POLICIES and POLICIES[key].builtin)


# `package.module:function`: a Python function any process can import by that name.
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


def is_import_path(text: str) -> bool:
    return not fm.is_formula_text(text) and bool(_IMPORT_PATH.match(text.strip()))


def import_policy(path: str) -> Policy:
    """The policy `module:function` names: a score function of StorageFeatures (its `needs`
    attribute, if any, names the upkeep it reads). Named by the path, so that a
    worker process rebuilds it by importing the module (it must be on the worker's sys.path)."""
    module_name, attr = path.strip().split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"policy {path!r}: cannot import {module_name!r} ({exc}); "
                         "is its folder on PYTHONPATH?") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"policy {path!r}: {module_name} has no function {attr!r}")
    needs = frozenset(getattr(fn, "needs", ()))
    unknown = needs - set(fm.NEEDS)
    if unknown:
        raise UsageError(f"policy {path!r} needs unknown features {sorted(unknown)} (known: {', '.join(fm.NEEDS)})")
    return Policy(path.strip(), fn, needs, description=(fn.__doc__ or "").strip().split("\n")[0])


def get_policy(name: str | Policy) -> Policy:
    """A policy by name or reference name, an inline formula (`score: ...`), or a Python
    function by its import path (`module:function`)."""
    if isinstance(name, Policy):
        return name
    if fm.is_formula_text(name):
        return formula_policy(name)
    if is_import_path(name):
        return import_policy(name)
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    policy = POLICIES.get(key)
    if policy is None and key == SOLVER_NAME:
        raise UsageError(f"{name!r} is the optimal solver, not an eviction policy: `dtrlab optimal` solves one "
                         "budget, `dtrlab sweep --policy optimal` many")
    if policy is None:
        raise UsageError(f"unknown policy {name!r} (known: {', '.join(POLICIES)}, or the reference class names)")
    return policy


def ablation_policies() -> list[Policy]:
    return [p for p in POLICIES.values() if p.name.startswith("ab-")]
