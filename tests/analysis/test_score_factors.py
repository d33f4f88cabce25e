"""The mechanism analysis names the factors of the policy's own score (analysis.mechanism.score_factors,
from sim.formula.factors), so an edit to a policy's formula moves the analysis with it."""

from __future__ import annotations

import math

import pytest

from dtrlab.analysis import mechanism as mech
from dtrlab.errors import UsageError
from dtrlab.sim import formula as fm
from dtrlab.sim.policies import get_policy


def test_dtr_factors_are_its_quotient():
    got = [(f.text.removeprefix("score: "), sign) for f, sign in fm.factors(get_policy("dtr").formula)]
    assert sorted(got) == sorted([("compute + estar", 1), ("size", -1), ("staleness", -1)])


@pytest.mark.parametrize("text, want", [
    ("score: (compute + estar) / (size * staleness ** 2)", {mech.ESTAR: 1, mech.SIZE: -1, mech.TIMING: -2}),
    ("score: 3 * compute / size", {"compute": 1, mech.SIZE: -1}),
    ("score: (compute + eqclass) / (size / staleness)", {mech.ESTAR: 1, mech.SIZE: -1, mech.TIMING: 1}),
])
def test_the_factors_follow_the_formula(text, want):
    factors = mech.score_factors(text)
    assert {name: sign for name, _, sign in factors} == want


def test_each_factor_multiplies_back_to_the_score():
    """The product of the factors (to their signs) is the score itself, for random feature values."""
    import random

    rng = random.Random(0)
    for text in ("score: (compute + estar) / (size * staleness ** 2)", "dtr", "score: compute * size / staleness"):
        formula = get_policy(text).formula
        for _ in range(50):
            values = {name: rng.randint(1, 10**6) for name in formula.features}
            product = math.prod(fm.evaluate(f, values) ** sign for f, sign in fm.factors(formula))
            assert math.isclose(product, fm.evaluate(formula, values), rel_tol=1e-9)


def test_a_random_policy_has_no_factor_to_name():
    with pytest.raises(UsageError, match="no formula"):
        mech.score_factors("random")
