"""The score language of eviction policies: its grammar, parser, typed form and canonical text.

Owns what a formula means (features, operators, exact arithmetic); the engines only evaluate it:
pyengine.py through `python_source`, the compiled engine through `postfix`.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field

from ..errors import UsageError

INF = math.inf

# What a score may ask for beyond the always-present features: each costs upkeep in the engine.
NEIGHBORHOOD = "regions"  # e* cost, maintained incrementally by an optimized runtime
EQ_CLASS = "eq_class"  # equivalence-class cost, maintained by an optimized runtime
FRESH_NEIGHBORHOOD = "fresh_regions"  # e* cost and staleness by a fresh traversal each time
HISTORY = "history"  # per-storage counts of evictions and rematerializations so far
NEEDS = (NEIGHBORHOOD, EQ_CLASS, FRESH_NEIGHBORHOOD, HISTORY)

# feature -> (what it is, the upkeep it needs or None). Times in ns, sizes in bytes.
FEATURES: dict[str, tuple[str, str | None]] = {
    "compute": ("cost of the operators that produce the storage's tensors", None),
    "size": ("the storage's size in bytes", None),
    "staleness": ("clock - last_access (inf before the storage's first use as an input)", None),
    "estar": ("e* cost: compute of the evicted storages reachable through evicted storages, "
              "both directions, as the incremental upkeep holds it", NEIGHBORHOOD),
    "ancestors": ("the reverse half of estar: evicted storages reached through inputs", NEIGHBORHOOD),
    "eqclass": ("compute of the distinct evicted equivalence classes next to the storage", EQ_CLASS),
    "fresh_estar": ("estar by a fresh traversal (not the incremental upkeep)", FRESH_NEIGHBORHOOD),
    "fresh_staleness": ("clock - the newest last_access of the storage and its fresh e* members",
                        FRESH_NEIGHBORHOOD),
    "last_access": ("the clock at the storage's last use as an input (-inf before any)", None),
    "clock": ("the clock now", None),
    "evictions": ("times the policy has evicted this storage so far", HISTORY),
    "remats": ("times this storage has been rematerialized so far", HISTORY),
    "budget": ("the run's memory budget in bytes", None),
    "resident": ("bytes in memory now", None),
}
FUNCTIONS = {"min": (2, None), "max": (2, None), "log": (1, 1)}  # name -> (fewest, most) arguments
BINARY = ("+", "-", "*", "/")
MAX_EXPONENT = 64  # `x ** n` takes a whole-number literal n in 0..MAX_EXPONENT
MAX_INT_LITERAL = 2**63 - 1
MAX_NESTING = 64  # parentheses, calls and unary minus: every walk of the tree may recurse
PREFIX = "score:"
RANDOM_TEXT = "random"

# The postfix program the compiled engine interprets: these names, numbered by _cengine.c
# (cengine.py checks at import that both sides know the same set).
OPCODES = ("feature", "int", "float", "neg", "add", "sub", "mul", "div", "pow", "min", "max", "log")


# --- the typed form ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Feature:
    name: str


@dataclass(frozen=True)
class Literal:
    value: int | float  # an int stays an exact integer; a float is an IEEE double
    is_float: bool = field(init=False)  # so that 1 and 1.0 are different literals

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_float", isinstance(self.value, float))


@dataclass(frozen=True)
class Neg:
    arg: Node


@dataclass(frozen=True)
class Binary:
    op: str  # one of BINARY
    left: Node
    right: Node


@dataclass(frozen=True)
class Power:
    base: Node
    exponent: int  # a whole-number literal: an integer base stays exact


@dataclass(frozen=True)
class Call:
    fn: str  # one of FUNCTIONS
    args: tuple[Node, ...]


Node = Feature | Literal | Neg | Binary | Power | Call


@dataclass(frozen=True)
class Formula:
    """A parsed score (root None: the seeded random choice). Equal formulas have equal text."""

    root: Node | None

    @property
    def is_random(self) -> bool:
        return self.root is None

    @property
    def text(self) -> str:
        return canonical(self)

    @property
    def features(self) -> frozenset[str]:
        return frozenset(_features(self.root)) if self.root is not None else frozenset()

    @property
    def needs(self) -> frozenset[str]:
        return frozenset(FEATURES[f][1] for f in self.features if FEATURES[f][1] is not None)


def _children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Neg):
        return (node.arg,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Power):
        return (node.base,)
    if isinstance(node, Call):
        return node.args
    return ()


def _features(root: Node):
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Feature):
            yield node.name
        stack.extend(_children(node))


# --- parsing ----------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
                    r"|(?P<op>\*\*|[-+*/(),]))")


class FormulaError(UsageError):
    """A formula that does not parse: one line with the column (1-based) of the mistake."""

    def __init__(self, text: str, column: int, reason: str, hint: str = "") -> None:
        super().__init__(f"policy {text!r}: {reason} at column {column}{f' ({hint})' if hint else ''}")
        self.column = column
        self.reason = reason


def _tokenize(text: str, start: int) -> list[tuple[str, str, int]]:
    """(kind, token, 0-based offset) triples, ending with ("end", "", len(text))."""
    out, pos = [], start
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            at = pos + len(text[pos:]) - len(text[pos:].lstrip())
            raise FormulaError(text, at + 1, f"unexpected character {text[at]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    out.append(("end", "", len(text)))
    return out


class _Parser:
    """Recursive descent, one method a precedence level; nesting is bounded by MAX_NESTING."""

    def __init__(self, text: str, tokens: list) -> None:
        self.text, self.tokens, self.i, self.level = text, tokens, 0, 0

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.i]

    def take(self) -> tuple[str, str, int]:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def fail(self, tok, reason: str, hint: str = ""):
        raise FormulaError(self.text, tok[2] + 1, reason, hint)

    def expect(self, op: str) -> None:
        tok = self.take()
        if tok[1] != op or tok[0] != "op":
            self.fail(tok, f"expected {op!r}, found {_shown(tok)}")

    def nest(self) -> None:
        self.level += 1
        if self.level > MAX_NESTING:
            self.fail(self.peek(), f"the score is nested more than {MAX_NESTING} deep")

    def expr(self) -> Node:
        self.nest()
        node = self.term()
        while self.peek()[0] == "op" and self.peek()[1] in "+-":
            op = self.take()[1]
            node = Binary(op, node, self.term())
        self.level -= 1
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("*", "/"):
            op = self.take()[1]
            node = Binary(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek()[:2] == ("op", "-"):
            self.take()
            self.nest()
            node = Neg(self.unary())
            self.level -= 1
            return node
        return self.power()

    def power(self) -> Node:
        base = self.atom()
        if self.peek()[:2] == ("op", "**"):
            self.take()
            tok = self.take()
            if tok[0] != "num" or not tok[1].isdigit() or int(tok[1]) > MAX_EXPONENT:
                self.fail(tok, f"the exponent of ** must be a whole number 0..{MAX_EXPONENT}, "
                               f"found {_shown(tok)}")
            return Power(base, int(tok[1]))
        return base

    def atom(self) -> Node:
        tok = self.take()
        kind, value, _ = tok
        if kind == "num":
            if any(c in value for c in ".eE"):
                number = float(value)
                if not math.isfinite(number):
                    self.fail(tok, f"number {value} is not finite")
                return Literal(number)
            if int(value) > MAX_INT_LITERAL:
                self.fail(tok, f"integer {value} is larger than 2**63 - 1")
            return Literal(int(value))
        if kind == "name":
            if value in FUNCTIONS:
                return self.call(tok)
            if value in FEATURES:
                return Feature(value)
            if value == RANDOM_TEXT:
                self.fail(tok, "'random' is a whole policy, not a term of a score")
            self.fail(tok, f"unknown feature {value!r}",
                      f"features: {', '.join(FEATURES)}; functions: {', '.join(FUNCTIONS)}")
        if (kind, value) == ("op", "("):
            node = self.expr()
            self.expect(")")
            return node
        self.fail(tok, f"expected a number, a feature or '(', found {_shown(tok)}")

    def call(self, name_tok) -> Node:
        fn = name_tok[1]
        self.expect("(")
        args = [self.expr()]
        while self.peek()[:2] == ("op", ","):
            self.take()
            args.append(self.expr())
        self.expect(")")
        fewest, most = FUNCTIONS[fn]
        if len(args) < fewest or (most is not None and len(args) > most):
            want = f"{fewest}" if fewest == most else f"at least {fewest}"
            self.fail(name_tok, f"{fn}() takes {want} argument{'s' if fewest > 1 else ''}, given {len(args)}")
        return Call(fn, tuple(args))


def _shown(tok) -> str:
    return "the end" if tok[0] == "end" else repr(tok[1])


def is_formula_text(text: str) -> bool:
    """Whether a --policy value is a formula rather than a policy's name."""
    return text.strip().lower().startswith(PREFIX)


def parse(text: str) -> Formula:
    """`score: EXPR` (the prefix is optional here) or `random`; FormulaError when it is not one."""
    body = text.strip()
    if body.lower() == RANDOM_TEXT:
        return Formula(None)
    start = len(text) - len(text.lstrip())
    if body.lower().startswith(PREFIX):
        start += len(PREFIX)
    parser = _Parser(text, _tokenize(text, start))
    if parser.peek()[0] == "end":
        parser.fail(parser.peek(), "empty score")
    root = parser.expr()
    if parser.peek()[0] != "end":
        parser.fail(parser.peek(), f"unexpected {_shown(parser.peek())}")
    return Formula(root)


# --- canonical text ---------------------------------------------------------------------------
_LEVEL = {"+": 1, "-": 1, "*": 2, "/": 2}
_NEG_LEVEL, _POW_LEVEL, _ATOM_LEVEL = 3, 4, 5


def _level(node: Node) -> int:
    if isinstance(node, Binary):
        return _LEVEL[node.op]
    if isinstance(node, Neg):
        return _NEG_LEVEL
    if isinstance(node, Power):
        return _POW_LEVEL
    return _ATOM_LEVEL


def _show(node: Node, least: int) -> str:
    """node's text, in parentheses when its level is below `least` (the tree is kept exactly:
    parse(text) gives the same tree, so the order of float operations is kept too)."""
    if isinstance(node, Feature):
        text = node.name
    elif isinstance(node, Literal):
        text = repr(node.value)
    elif isinstance(node, Neg):
        text = "-" + _show(node.arg, _NEG_LEVEL)
    elif isinstance(node, Binary):
        lv = _LEVEL[node.op]
        text = f"{_show(node.left, lv)} {node.op} {_show(node.right, lv + 1)}"
    elif isinstance(node, Power):
        text = f"{_show(node.base, _ATOM_LEVEL)} ** {node.exponent}"
    else:
        text = f"{node.fn}({', '.join(_show(a, 0) for a in node.args)})"
    return f"({text})" if _level(node) < least else text


def canonical(formula: Formula) -> str:
    """The formula's one text, with only the parentheses it needs: parse(canonical(f)) == f."""
    return RANDOM_TEXT if formula.root is None else f"{PREFIX} {_show(formula.root, 0)}"


# --- the Python evaluation ----------------------------------------------------------------------
def fpow(x: float, n: int) -> float:
    """x ** n for a float x as C's pow() gives it (math.pow calls the same libm pow)."""
    try:
        return math.pow(x, n)
    except OverflowError:  # C's pow returns +-HUGE_VAL here
        return -INF if (x < 0 and n % 2) else INF


def power(x, n: int):
    return x ** n if x.__class__ is int else fpow(x, n)


def log(x):
    """libm's log, with C's answers where math.log raises: log(0) = -inf, log(x < 0) = nan."""
    if x > 0:
        return math.log(x)
    return -INF if x == 0 else math.nan


def python_source(formula: Formula, feature: dict[str, str]) -> str:
    """A Python expression computing the score, given each feature's expression. Needs INF,
    power and log of this module in its namespace. Integers stay exact Python ints; `/` is
    the reference's quotient: correctly rounded, inf when the denominator is not > 0."""
    counter = itertools.count()

    def src(node: Node) -> str:
        if isinstance(node, Feature):
            return f"({feature[node.name]})"
        if isinstance(node, Literal):
            return repr(node.value)
        if isinstance(node, Neg):
            return f"(-{src(node.arg)})"
        if isinstance(node, Binary):
            if node.op == "/":
                d = f"_d{next(counter)}"
                return f"({src(node.left)} / {d} if ({d} := {src(node.right)}) > 0 else INF)"
            return f"({src(node.left)} {node.op} {src(node.right)})"
        if isinstance(node, Power):
            return f"power({src(node.base)}, {node.exponent})"
        if node.fn == "log":
            return f"log({src(node.args[0])})"
        return f"{node.fn}({', '.join(src(a) for a in node.args)})"

    if formula.root is None:
        raise ValueError("the random policy has no score")
    return src(formula.root)


NAMESPACE = {"INF": INF, "power": power, "log": log, "min": min, "max": max}


def factors(formula: Formula) -> tuple[tuple[Formula, int], ...]:
    """The score as a product of factors, each with its sign in the log of the score: the numerator's
    factors +1, the denominator's -1 (DTR: compute + estar, then size and staleness). A power counts
    as its base with its exponent."""
    out: list[tuple[Formula, int]] = []

    def walk(node: Node, sign: int) -> None:
        if isinstance(node, Binary) and node.op == "*":
            walk(node.left, sign)
            walk(node.right, sign)
        elif isinstance(node, Binary) and node.op == "/":
            walk(node.left, sign)
            walk(node.right, -sign)
        elif isinstance(node, Power) and node.exponent != 0:
            walk(node.base, sign * node.exponent)
        elif not isinstance(node, Literal):
            out.append((Formula(node), sign))

    if formula.root is not None:
        walk(formula.root, 1)
    return tuple(out)


def evaluate(formula: Formula, values: dict[str, int | float]):
    """The score for the given feature values: the definition the engines are tested against."""
    code = python_source(formula, {name: f"v[{name!r}]" for name in formula.features})
    return eval(code, dict(NAMESPACE, v=values))  # noqa: S307 - our own generated text


# --- the compiled engine's program --------------------------------------------------------------
@dataclass(frozen=True)
class Postfix:
    """A flat program: (opcode name, argument) pairs; argument is a feature name, an int, an
    index into floats, an exponent, or 0. `depth` is the value stack it needs."""

    code: tuple[tuple[str, int | str], ...]
    floats: tuple[float, ...]
    depth: int


def postfix(formula: Formula) -> Postfix:
    """Children first, left to right: the order the Python expression evaluates in."""
    code: list[tuple[str, int | str]] = []
    floats: list[float] = []
    depth = top = 0
    names = {"+": "add", "-": "sub", "*": "mul", "/": "div"}

    def push(op, arg=0, pops=0):
        nonlocal depth, top
        code.append((op, arg))
        top += 1 - pops
        depth = max(depth, top)

    def emit(node: Node) -> None:  # recursion is bounded by MAX_NESTING
        if isinstance(node, Feature):
            push("feature", node.name)
        elif isinstance(node, Literal):
            if isinstance(node.value, int):
                push("int", node.value)
            else:
                floats.append(node.value)
                push("float", len(floats) - 1)
        elif isinstance(node, Neg):
            emit(node.arg)
            push("neg", 0, 1)
        elif isinstance(node, Binary):
            emit(node.left)
            emit(node.right)
            push(names[node.op], 0, 2)
        elif isinstance(node, Power):
            emit(node.base)
            push("pow", node.exponent, 1)
        elif node.fn == "log":
            emit(node.args[0])
            push("log", 0, 1)
        else:
            emit(node.args[0])
            for arg in node.args[1:]:  # min(a, b, c) = min(min(a, b), c), as Python's min scans
                emit(arg)
                push(node.fn, 0, 2)

    if formula.root is None:
        raise ValueError("the random policy has no score")
    emit(formula.root)
    return Postfix(tuple(code), tuple(floats), depth)
