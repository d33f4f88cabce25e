"""Hypothesis strategies for the score language: random formulas and random feature values."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from dtrlab.sim import formula as fm

# Features every runtime offers (regions and eq classes need an optimized one; see LOCKSTEP_FEATURES).
CHEAP_FEATURES = ("compute", "size", "staleness", "last_access", "clock", "evictions", "remats",
                  "budget", "resident", "fresh_estar", "fresh_staleness")


def formula_nodes(features=tuple(fm.FEATURES), max_leaves: int = 12):
    """Random trees of the typed form: every operator, integer and float literals."""
    leaves = st.one_of(
        st.sampled_from(features).map(fm.Feature),
        st.integers(0, 2**40).map(fm.Literal),
        st.integers(0, 3).map(fm.Literal),
        st.floats(0, 1e6, allow_nan=False, allow_infinity=False).map(fm.Literal),
    )

    def extend(children):
        return st.one_of(
            st.tuples(st.sampled_from(fm.BINARY), children, children).map(lambda t: fm.Binary(*t)),
            children.map(fm.Neg),
            st.tuples(children, st.integers(0, 4)).map(lambda t: fm.Power(*t)),
            st.tuples(st.sampled_from(("min", "max")), st.lists(children, min_size=2, max_size=3))
            .map(lambda t: fm.Call(t[0], tuple(t[1]))),
            children.map(lambda c: fm.Call("log", (c,))),
        )

    return st.recursive(leaves, extend, max_leaves=max_leaves).map(fm.Formula)


def feature_values():
    """Values as an engine sees them, and harder ones: huge, zero, negative, infinite, -0.0."""
    ints = st.one_of(st.integers(-3, 3), st.integers(0, 2**40), st.integers(-(2**62), 2**62))
    floats = st.sampled_from([math.inf, -math.inf, -0.0, 0.0, 0.5, 1e300, math.nan])
    value = st.one_of(ints, ints, floats)
    return st.fixed_dictionaries({name: value for name in fm.FEATURES})
