"""Budget grids (ratio lists and exact decimal ranges, byte budgets, refinement) and RunSpec.

A RunSpec is one (trace, policy, runtime, budget, options) run, keyed by a stable hash.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from functools import cached_property
from decimal import Decimal, InvalidOperation
from typing import Iterable, Sequence

from ..semantics import SEMANTICS_VERSION
from ..errors import UsageError
from ..sim.policies import get_policy, policy_key
from ..sim.result import OK, TIMEOUT
from ..sim.runtimes import get_runtime
from ..sim.simulate import ENGINES, budget_from_ratio, check_budget_bytes, check_compatible
from ..trace.lower import Program

# A typo such as 0:1:0.0000001 would otherwise build ten million specs before anything runs.
MAX_GRID_POINTS = 1_000_000


def _decimal(text: str, what: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise UsageError(f"{what}: {text.strip()!r} is not a number") from None
    if not value.is_finite():
        raise UsageError(f"{what}: {text.strip()!r} is not a finite number")
    return value


def _decimal_range(item: str, what: str) -> list[Decimal]:
    parts = item.split(":")
    if len(parts) != 3:
        raise UsageError(f"{what}: a range is START:STOP:STEP, got {item.strip()!r}")
    start, stop, step = (_decimal(p, what) for p in parts)
    if step <= 0:
        raise UsageError(f"{what}: the step of {item.strip()!r} must be positive")
    if stop < start:
        raise UsageError(f"{what}: {item.strip()!r} stops before it starts")
    count = int((stop - start) / step) + 1
    if count > MAX_GRID_POINTS:
        raise UsageError(f"{what}: {item.strip()!r} has {count} points (at most {MAX_GRID_POINTS})")
    # start + i x step in decimal arithmetic: exact, so the last point is STOP itself when
    # the step divides the span, and no float drift creeps in at the third or fourth digit.
    return [start + i * step for i in range(count)]


def _decimals(spec: str, what: str) -> list[Decimal]:
    if not spec or not spec.strip():
        raise UsageError(f"{what}: empty list")
    values: list[Decimal] = []
    for item in spec.split(","):
        if not item.strip():
            raise UsageError(f"{what}: empty item in {spec!r}")
        values.extend(_decimal_range(item, what) if ":" in item else [_decimal(item, what)])
    return values


def _unique_sorted(values: Iterable) -> tuple:
    return tuple(sorted(set(values)))


def parse_ratios(spec: str) -> tuple[float, ...]:
    """Ratios from "0.1,0.2" or an inclusive "START:STOP:STEP" (or a mix), sorted and unique.

    Each ratio is the float of its decimal literal: 0.090:0.120:0.001 gives exactly
    float("0.09"), float("0.091"), ..., float("0.12").
    """
    decimals = _decimals(spec, "ratios")
    for d in decimals:
        if d <= 0:
            raise UsageError(f"ratios: {d} is not positive")
    # float(str(d)) is the float nearest the literal, the same float a user typing it gets.
    return _unique_sorted(float(str(d)) for d in decimals)


def parse_budget_bytes(spec: str) -> tuple[int, ...]:
    """Byte budgets from "1000000,2000000" or an inclusive integer "START:STOP:STEP"."""
    decimals = _decimals(spec, "budget bytes")
    for d in decimals:
        if d != d.to_integral_value():
            raise UsageError(f"budget bytes: {d} is not a non-negative whole number of bytes")
        check_budget_bytes(int(d))
    return _unique_sorted(int(d) for d in decimals)


def ratio_literal(ratio: float) -> Decimal:
    """The decimal literal a ratio float came from: repr is the shortest string that round-trips."""
    return Decimal(repr(float(ratio)))


def _digits(d: Decimal) -> int:
    return max(0, -d.as_tuple().exponent)


def between(lo: float, hi: float, k: int) -> list[float]:
    """k ratios strictly between lo and hi, evenly spread, as literals one decimal digit finer.

    One digit finer than the finer endpoint, or finer still when k points do not fit there,
    so 0.091 and 0.092 give 0.0911, 0.0912, ...: new ratios are exact decimal literals too.
    """
    a, b = ratio_literal(lo), ratio_literal(hi)
    if k <= 0 or b <= a:
        return []
    digits = max(_digits(a), _digits(b)) + 1
    while True:
        quantum = Decimal(1).scaleb(-digits)
        steps = int((b - a) / quantum)  # a and b sit on this grid: the division is exact
        if steps >= k + 1:
            break
        digits += 1
    picks = sorted({round(i * steps / (k + 1)) for i in range(1, k + 1)})
    return [float(str((a + j * quantum).normalize())) for j in picks]


@dataclass(frozen=True)
class Point:
    """What refinement needs of one finished run."""

    ratio: float
    outcome: str
    overhead: float | None


def _differ(p: Point, q: Point, factor: float) -> bool:
    if p.outcome != q.outcome:
        return True
    if p.outcome != OK or not p.overhead or not q.overhead:
        return False  # only finished runs have overheads worth comparing
    return max(p.overhead, q.overhead) / min(p.overhead, q.overhead) > factor


def refine(points: Iterable[Point], k: int, factor: float) -> tuple[float, ...]:
    """New ratios: k between each pair of neighbours whose outcome differs or whose
    overheads differ by more than `factor`. Timed-out runs say nothing and are skipped."""
    if factor < 1:
        raise UsageError(f"refinement factor must be at least 1, got {factor}")
    known = sorted((p for p in points if p.outcome != TIMEOUT and p.ratio is not None),
                   key=lambda p: p.ratio)
    have = {p.ratio for p in known}
    new: set[float] = set()
    for p, q in zip(known, known[1:]):
        if p.ratio != q.ratio and _differ(p, q, factor):
            new.update(r for r in between(p.ratio, q.ratio, k) if r not in have)
    return tuple(sorted(new))


def portable_name(policy) -> str:
    """How a spec names its policy so that a worker process can rebuild it: a built-in by its name,
    a formula registered in this process by its text (the worker has not registered it)."""
    if policy.builtin or policy.formula is None:
        return policy.name
    return policy.formula.text


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: which trace (by content), policy, runtime, budget and options.

    `key` identifies the result: it hashes what decides it, so the same run under another
    path, ratio spelling or engine is the same key, and a new semantics version is a new one.
    """

    trace: str
    trace_sha256: str
    source: str  # where a worker loads the trace from
    policy: str
    runtime: str
    budget_bytes: int
    ratio: float | None = None  # None: a byte budget given directly
    overhead_limit: float | None = None
    seed: int = 0
    engine: str = "auto"  # results never depend on it, so it is not part of the key

    @cached_property  # a frozen dataclass still has a __dict__ for it; fields decide equality
    def key(self) -> str:
        canonical = json.dumps({
            "trace_sha256": self.trace_sha256,
            # The name and the formula: two formulas under one name never share a row, and a row's
            # policy column is the name it was asked for (ab-e-size-stale is dtr's formula too).
            "policy": self.policy,
            "formula": policy_key(get_policy(self.policy)),
            "runtime": self.runtime,
            "options": {"overhead_limit": self.overhead_limit, "seed": self.seed},
            "budget_bytes": self.budget_bytes,
            "semantics": SEMANTICS_VERSION,
        }, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def group(self) -> tuple:
        """The runs that differ only in budget: one curve of overhead against ratio."""
        return (self.trace_sha256, self.trace, self.source, self.policy, self.runtime,
                self.overhead_limit, self.seed, self.engine)


def build_specs(source: str, programs: Sequence[Program], policies: Sequence[str],
                runtimes: Sequence[str], ratios: Sequence[float] = (),
                budgets_bytes: Sequence[int] = (), *, overhead_limit: float | None = None,
                seed: int = 0, engine: str = "auto") -> list[RunSpec]:
    """The cross product traces x policies x runtimes x budgets, one spec per distinct key.

    Two ratios that round to the same byte budget are one run; the first ratio names it.
    """
    if not ratios and not budgets_bytes:
        raise UsageError("give budgets: --ratios and/or --budget-bytes")
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    if overhead_limit is not None:
        if not (math.isfinite(overhead_limit) and overhead_limit >= 1):
            raise UsageError(f"overhead limit must be a number of at least 1, got {overhead_limit}")
        overhead_limit = float(overhead_limit)
    pols = list(dict.fromkeys(portable_name(get_policy(p)) for p in policies))
    rts = list(dict.fromkeys(get_runtime(r).name for r in runtimes))
    for p, r in itertools.product(pols, rts):
        check_compatible(get_policy(p), get_runtime(r))
    specs: dict[str, RunSpec] = {}
    for program in programs:
        budgets = [(budget_from_ratio(program, r), float(r)) for r in ratios]
        budgets += [(check_budget_bytes(int(b), "budget"), None) for b in budgets_bytes]
        for policy, runtime, (budget, ratio) in itertools.product(pols, rts, budgets):
            spec = RunSpec(program.name, program.sha256, str(source), policy, runtime, budget,
                           ratio, overhead_limit, int(seed), engine)
            specs.setdefault(spec.key, spec)
    return list(specs.values())
