"""The score language: parsing, canonical text, needs, and the exact arithmetic of both engines.

The arithmetic is checked against an oracle written here, a tree walk over Python's own numbers
(independent of formula.py's generated code and of the C interpreter)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import needs_compiled
from dtrlab.errors import UsageError
from dtrlab.sim import formula as fm
from dtrlab.sim.formula import FormulaError, parse
from dtrlab.sim.policies import POLICIES, REMEDY_POLICIES, StorageFeatures, get_policy, policy_key
from formula_strategies import feature_values, formula_nodes

I128 = 2**127


# --- parsing ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text, canonical", [
    ("score: (compute + estar) / (size * staleness ** 2)", "score: (compute + estar) / (size * staleness ** 2)"),
    ("score:compute/(size*staleness)", "score: compute / (size * staleness)"),
    ("  SCORE: ((compute))  ", "score: compute"),
    ("compute - (size - clock)", "score: compute - (size - clock)"),
    ("score: compute - size - clock", "score: compute - size - clock"),
    ("score: -compute ** 2", "score: -compute ** 2"),
    ("score: (-compute) ** 2", "score: (-compute) ** 2"),
    ("score: (compute ** 2) ** 3", "score: (compute ** 2) ** 3"),
    ("score: min(compute, size, 3) + max(1.5, log(size))", "score: min(compute, size, 3) + max(1.5, log(size))"),
    ("score: 2.5e3 * compute + 1e-3 - --size", "score: 2500.0 * compute + 0.001 - --size"),
    ("random", "random"),
    ("  Random ", "random"),
])
def test_canonical_text(text, canonical):
    f = parse(text)
    assert f.text == canonical
    assert parse(f.text) == f


def test_literals_keep_their_kind():
    assert parse("score: compute * 1") != parse("score: compute * 1.0")
    assert parse("score: compute * 1").text != parse("score: compute * 1.0").text


@pytest.mark.parametrize("text, column, reason", [
    ("score: compute / sise", 18, "unknown feature 'sise'"),
    ("score: (compute", 16, "expected ')', found the end"),
    ("score: compute +", 17, "expected a number, a feature or '(', found the end"),
    ("score: compute size", 16, "unexpected 'size'"),
    ("score: compute ** 2.5", 19, "the exponent of ** must be a whole number 0..64"),
    ("score: compute ** 65", 19, "the exponent of ** must be a whole number 0..64"),
    ("score: compute ** size", 19, "the exponent of ** must be a whole number"),
    ("score: min(compute)", 8, "min() takes at least 2 arguments, given 1"),
    ("score: log(compute, size)", 8, "log() takes 1 argument, given 2"),
    ("score: compute $ 2", 16, "unexpected character '$'"),
    ("score: 1 + random", 12, "'random' is a whole policy"),
    ("score: 99999999999999999999", 8, "larger than 2**63 - 1"),
    ("score:", 7, "empty score"),
    ("score: " + "(" * 70 + "size" + ")" * 70, 72, "nested more than 64 deep"),
])
def test_bad_formulas_say_where_and_why_in_one_line(text, column, reason):
    with pytest.raises(FormulaError) as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, UsageError)
    assert message.startswith(f"policy {text!r}: ")
    assert reason in message and f"at column {column}" in message
    assert info.value.column == column


def test_unknown_feature_lists_the_features():
    with pytest.raises(FormulaError, match=r"at column 18 \(features: compute, size, staleness, estar"):
        parse("score: compute / sise")


@settings(max_examples=400, deadline=None)
@given(formula_nodes())
def test_canonical_round_trips_on_generated_formulas(f):
    assert parse(f.text) == f
    assert parse(f.text).text == f.text


@pytest.mark.parametrize("text, needs", [
    ("score: compute / size", set()),
    ("score: (compute + estar) / size", {fm.NEIGHBORHOOD}),
    ("score: ancestors", {fm.NEIGHBORHOOD}),
    ("score: eqclass + fresh_staleness", {fm.EQ_CLASS, fm.FRESH_NEIGHBORHOOD}),
    ("score: compute / (1 + evictions + remats)", {fm.HISTORY}),
    ("random", set()),
])
def test_needs_follow_from_the_features(text, needs):
    assert parse(text).needs == needs


def test_inline_formula_is_a_policy_keyed_by_its_text():
    a = get_policy("score: (compute+estar)/(size*staleness)")
    b = get_policy("score: (compute + estar) / (size * staleness ** 2)")
    assert a.name == policy_key(a) == "score: (compute + estar) / (size * staleness)"
    assert policy_key(a) != policy_key(b)
    assert policy_key(get_policy("dtr")) == policy_key(a)  # the same meaning, the same key


# --- the built-ins are the reference's scores -----------------------------------------------------
def _q(num, den):  # the reference's quotient, written again here
    return num / den if den > 0 else math.inf


REFERENCE_SCORES = {  # the scores of simrd's heuristics (DTR paper, appendix), by hand
    "dtr": lambda f: _q(f.compute_ns + f.neighborhood_ns, f.size_bytes * f.staleness_ns),
    "dtr-eq": lambda f: _q(f.compute_ns + f.eq_class_ns, f.size_bytes * f.staleness_ns),
    "dtr-local": lambda f: _q(f.compute_ns, f.size_bytes * f.staleness_ns),
    "dtr-unopt": lambda f: _q(f.compute_ns + f.fresh_neighborhood_ns, f.size_bytes * f.fresh_staleness_ns),
    "dtr-fresh": lambda f: _q(f.compute_ns + f.fresh_neighborhood_ns, f.size_bytes * f.staleness_ns),
    "msps": lambda f: _q(f.compute_ns + f.ancestors_ns, f.size_bytes),
    "lru": lambda f: f.last_access_ns,
    "size": lambda f: _q(1, f.size_bytes),
    "ab-e-size-stale": lambda f: _q(f.compute_ns + f.neighborhood_ns, f.size_bytes * f.staleness_ns),
    "ab-e-size": lambda f: _q(f.compute_ns + f.neighborhood_ns, f.size_bytes),
    "ab-e-stale": lambda f: _q(f.compute_ns + f.neighborhood_ns, f.staleness_ns),
    "ab-e": lambda f: f.compute_ns + f.neighborhood_ns,
    "ab-eq-size-stale": lambda f: _q(f.compute_ns + f.eq_class_ns, f.size_bytes * f.staleness_ns),
    "ab-eq-size": lambda f: _q(f.compute_ns + f.eq_class_ns, f.size_bytes),
    "ab-eq-stale": lambda f: _q(f.compute_ns + f.eq_class_ns, f.staleness_ns),
    "ab-eq": lambda f: f.compute_ns + f.eq_class_ns,
    "ab-local-size-stale": lambda f: _q(f.compute_ns, f.size_bytes * f.staleness_ns),
    "ab-local-size": lambda f: _q(f.compute_ns, f.size_bytes),
    "ab-local-stale": lambda f: _q(f.compute_ns, f.staleness_ns),
    "ab-local": lambda f: f.compute_ns,
    "ab-none-size-stale": lambda f: _q(1, f.size_bytes * f.staleness_ns),
    "ab-none-size": lambda f: _q(1, f.size_bytes),
    "ab-none-stale": lambda f: _q(1, f.staleness_ns),
}

# dtrlab's remedies (docs/policies.md), by hand: not the reference's, so kept apart.
REMEDY_SCORES = {
    "dtr-ancestors-sq": lambda f: _q((f.compute_ns + f.ancestors_ns) ** 2, f.size_bytes * f.staleness_ns),
    "dtr-ancestors": lambda f: _q(f.compute_ns + f.ancestors_ns, f.size_bytes * f.staleness_ns),
    "dtr-cost-sq": lambda f: _q((f.compute_ns + f.neighborhood_ns) ** 2, f.size_bytes * f.staleness_ns),
}

_counts = st.integers(0, 2**45)
_times = st.one_of(st.integers(0, 2**45), st.just(math.inf))
storage_features = st.builds(
    StorageFeatures, compute_ns=_counts, size_bytes=st.integers(0, 2**40), staleness_ns=_times,
    last_access_ns=st.one_of(st.integers(0, 2**45), st.just(-math.inf)), clock_ns=_counts,
    neighborhood_ns=_counts, ancestors_ns=_counts, eq_class_ns=_counts, fresh_neighborhood_ns=_counts,
    fresh_staleness_ns=_times)


def test_every_builtin_is_a_formula():
    builtins = [p for p in POLICIES.values() if p.builtin]
    assert len(builtins) == 25 + len(REMEDY_SCORES) and all(p.formula is not None for p in builtins)
    random = {p.name for p in builtins if p.is_random}
    assert random == {"random", "ab-none"}
    assert set(REFERENCE_SCORES) == {p.name for p in builtins} - random - set(REMEDY_SCORES)
    assert set(REMEDY_SCORES) == set(REMEDY_POLICIES)


@settings(max_examples=300, deadline=None)
@given(storage_features)
def test_builtin_formulas_are_the_reference_scores(f):
    for name, reference in {**REFERENCE_SCORES, **REMEDY_SCORES}.items():
        got, want = POLICIES[name].score(f), reference(f)
        assert type(got) is type(want) and got == want, name


# --- exact arithmetic: C == Python == the oracle ---------------------------------------------------
class _Big(Exception):
    """An integer intermediate outside the compiled engine's 128 bits."""


def oracle(node, v):
    """Python's numbers, node by node; _Big when an integer leaves [-2**127, 2**127)."""
    if isinstance(node, fm.Feature):
        out = v[node.name]
    elif isinstance(node, fm.Literal):
        out = node.value
    elif isinstance(node, fm.Neg):
        out = -oracle(node.arg, v)
    elif isinstance(node, fm.Binary):
        a, b = oracle(node.left, v), oracle(node.right, v)
        if node.op == "/":
            out = a / b if b > 0 else math.inf
        else:
            out = a + b if node.op == "+" else a - b if node.op == "-" else a * b
    elif isinstance(node, fm.Power):
        a = oracle(node.base, v)
        try:
            out = a ** node.exponent
        except OverflowError:  # float ** int past the largest double: C's pow gives +-inf
            out = math.copysign(math.inf, a) if node.exponent % 2 else math.inf
    elif node.fn == "log":
        a = oracle(node.args[0], v)
        out = math.log(a) if a > 0 else (-math.inf if a == 0 else math.nan)
    else:
        args = [oracle(a, v) for a in node.args]
        out = (min if node.fn == "min" else max)(*args)
    if isinstance(out, int) and not -I128 <= out < I128:
        raise _Big()
    return out


def same(a, b) -> bool:
    """Equal as values and as kinds: int vs float, the sign of zero, NaN with NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def c_evaluate(formula, values):
    from dtrlab.sim import _cengine
    from dtrlab.sim.cengine import _program_arrays

    code, floats = _program_arrays(formula)
    return _cengine.evaluate(code, floats, [values[name] for name in _cengine.FEATURES])


@pytest.mark.slow
@needs_compiled
@settings(max_examples=3000, deadline=None)
@given(formula_nodes(), feature_values())
def test_c_and_python_evaluate_every_formula_alike(f, values):
    try:
        want = oracle(f.root, values)
    except _Big:
        with pytest.raises(OverflowError):
            c_evaluate(f, values)
        return
    except OverflowError:
        return  # a float(int) past the largest double: impossible within 128-bit integers
    assert same(fm.evaluate(f, values), want)
    assert same(c_evaluate(f, values), want)


@needs_compiled
@pytest.mark.parametrize("text, values, want", [
    # products far past 64 bits stay exact, and the quotient is rounded once
    ("score: compute / (size * staleness)", dict(compute=3, size=2**62 + 1, staleness=2**62 + 3),
     3 / ((2**62 + 1) * (2**62 + 3))),
    ("score: (compute * size) / staleness", dict(compute=2**62 - 1, size=2**62 - 3, staleness=7),
     ((2**62 - 1) * (2**62 - 3)) / 7),
    ("score: compute / staleness", dict(compute=5, staleness=0), math.inf),
    ("score: compute / staleness", dict(compute=5, staleness=-4), math.inf),
    ("score: compute / (size * staleness)", dict(compute=5, size=0, staleness=math.inf), math.inf),  # 0 * inf
    ("score: compute / (size * staleness)", dict(compute=5, size=3, staleness=math.inf), 0.0),
    ("score: -compute / (size * staleness)", dict(compute=5, size=3, staleness=math.inf), -0.0),
    ("score: last_access", dict(last_access=-math.inf), -math.inf),
    ("score: staleness ** 2", dict(staleness=2**63 - 1), (2**63 - 1) ** 2),
    ("score: log(compute) + log(0) * 0", dict(compute=10), math.nan),  # -inf * 0
])
def test_exact_arithmetic_by_hand(text, values, want):
    f = parse(text)
    full = dict.fromkeys(fm.FEATURES, 1) | values
    assert same(fm.evaluate(f, full), want)
    assert same(c_evaluate(f, full), want)


@needs_compiled
def test_past_128_bits_the_compiled_evaluation_stops():
    f = parse("score: compute * size * staleness")
    values = dict.fromkeys(fm.FEATURES, 1) | dict(compute=2**62, size=2**62, staleness=2**10)
    assert fm.evaluate(f, values) == 2**134
    with pytest.raises(OverflowError):
        c_evaluate(f, values)


@needs_compiled
def test_the_c_module_checks_the_program_it_is_given():
    from dtrlab.sim import _cengine

    feats = [1] * len(_cengine.FEATURES)
    empty = np.zeros(0, np.float64)
    with pytest.raises(ValueError, match="instruction 0"):
        _cengine.evaluate(np.array([[_cengine.OPCODES["add"], 0]], np.int64), empty, feats)
    with pytest.raises(ValueError, match="instruction 0"):
        _cengine.evaluate(np.array([[_cengine.OPCODES["feature"], 99]], np.int64), empty, feats)
    with pytest.raises(ValueError, match="one value"):
        _cengine.evaluate(np.array([[_cengine.OPCODES["int"], 1]] * 2, np.int64), empty, feats)
