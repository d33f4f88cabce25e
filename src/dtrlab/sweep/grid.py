"""Budget grids (ratio lists and exact decimal ranges, byte budgets, refinement) and RunSpec.

A RunSpec is one (trace, policy, runtime, budget, options) run, keyed by a stable hash; the policy
`optimal` is the solver's run at one budget instead of a simulation (its settings in the key).
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
from ..optimal.defaults import OPTIMAL_POLICY, SolveSettings
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


# The runtime column of an optimal row: a solver's schedule is held to the schedule checker's memory
# model (docs/schedules.md), not run by a runtime of the simulator.
CHECKER_RUNTIME = "checker"


def is_optimal(policy: str) -> bool:
    """Whether a policy name asks for the solver (`--policy optimal`) rather than an eviction policy."""
    return policy.strip().lower() == OPTIMAL_POLICY


def portable_name(policy) -> str:
    """How a spec names its policy so that a worker process can rebuild it: a built-in by its name,
    a formula registered in this process by its text (the worker has not registered it)."""
    if policy.builtin or policy.formula is None:
        return policy.name
    return policy.formula.text


@dataclass(frozen=True)
class Keep:
    """What a worker keeps of a run beside its row: `function` ("module:function") runs the spec in
    the worker's place, as function(program, spec, folder) -> RunResult, and keeps what else it
    wants of the run under `folder` (the report keeps each run's facts so it need not run it again).
    The function must give exactly simulate()'s result."""

    function: str
    folder: str


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
    solve: SolveSettings | None = None  # the solver's settings: set for the policy `optimal` only
    keep: Keep | None = None  # what else the worker keeps of the run; not part of the key

    def __post_init__(self) -> None:
        if (self.solve is not None) != (self.policy == OPTIMAL_POLICY):
            raise ValueError(f"a spec of policy {self.policy!r} with solve={self.solve!r}: the solver's settings "
                             f"go with the policy {OPTIMAL_POLICY!r} and only with it")

    @cached_property  # a frozen dataclass still has a __dict__ for it; fields decide equality
    def key(self) -> str:
        if self.solve is not None:  # a solve: the checker's model decides, and the solve's settings
            canonical = json.dumps({
                "trace_sha256": self.trace_sha256, "policy": OPTIMAL_POLICY, "solve": self.solve.key(),
                "budget_bytes": self.budget_bytes, "semantics": SEMANTICS_VERSION,
            }, sort_keys=True, separators=(",", ":"))
            return hashlib.sha256(canonical.encode()).hexdigest()
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
                self.overhead_limit, self.seed, self.engine, self.solve)


def build_specs(source: str, programs: Sequence[Program], policies: Sequence[str],
                runtimes: Sequence[str], ratios: Sequence[float] = (),
                budgets_bytes: Sequence[int] = (), *, overhead_limit: float | None = None,
                seed: int = 0, engine: str = "auto", solve: SolveSettings | None = None) -> list[RunSpec]:
    """The cross product traces x policies x runtimes x budgets, one spec per distinct key.

    Two ratios that round to the same byte budget are one run; the first ratio names it. The policy
    `optimal` is one solve a (trace, budget) under `solve` (default: SolveSettings()), whatever the
    runtimes; its specs have no overhead limit, seed or engine.
    """
    if not ratios and not budgets_bytes:
        raise UsageError("give budgets: --ratios and/or --budget-bytes")
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    if overhead_limit is not None:
        if not (math.isfinite(overhead_limit) and overhead_limit >= 1):
            raise UsageError(f"overhead limit must be a number of at least 1, got {overhead_limit}")
        overhead_limit = float(overhead_limit)
    solver = any(is_optimal(p) for p in policies)
    pols = list(dict.fromkeys(portable_name(get_policy(p)) for p in policies if not is_optimal(p)))
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
        if solver:
            settings = solve or SolveSettings()
            for budget, ratio in budgets:
                spec = RunSpec(program.name, program.sha256, str(source), OPTIMAL_POLICY, CHECKER_RUNTIME, budget,
                               ratio, solve=settings)
                specs.setdefault(spec.key, spec)
    return list(specs.values())
