"""The public face of the engines: baseline, budgets, and `simulate` choosing an engine by name."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ..defaults import BUDGET_NOTATION, ENGINES
from ..errors import UsageError
from ..trace.cache import STORED_BASELINE, remember_baseline
from ..trace.lower import Program
from ..trace.read import INT64_MAX
from . import cengine, pyengine
from .progress import PROGRESS_EVERY, RunInterrupted
from .policies import DEFAULT_POLICY, EQ_CLASS, NEIGHBORHOOD, Policy, get_policy
from .result import INTERRUPTED, RunResult
from .runtimes import DEFAULT_RUNTIME, Runtime, get_runtime


@dataclass(frozen=True)
class Baseline:
    """The unconstrained run (banishing runtime, unbounded budget): what ratios are taken of."""

    peak_bytes: int
    compute_ns: int


def compute_baseline(program: Program) -> Baseline:
    engine = pyengine.Engine(program, math.inf, get_policy("lru"), get_runtime("banishing"))
    outcome = engine.run()
    assert outcome == "ok" and engine.remat_ns == 0, "an unbounded run must not rematerialize"
    return Baseline(engine.peak, engine.model_ns)


def baseline(program: Program) -> Baseline:
    """The program's baseline, computed once and kept with it (and in the program cache)."""
    cached = program.meta.get("baseline")
    if cached is None:
        stored = program.meta.get(STORED_BASELINE)
        if stored is not None:
            cached = Baseline(*stored)
        else:
            cached = compute_baseline(program)
            remember_baseline(program, cached.peak_bytes, cached.compute_ns)
        program.meta["baseline"] = cached
    return cached


def parse_ratio(ratio: float | str) -> float:
    value = float(ratio)
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(f"ratio must be a positive number, got {ratio!r}")
    return value


# Budgets are int64 in the compiled engine, as sizes are in a Program.
MAX_BUDGET_BYTES = INT64_MAX


def check_budget_bytes(budget_bytes: int, what: str = "--budget-bytes") -> int:
    """A byte budget the engines can hold: a whole number from 0 to MAX_BUDGET_BYTES (2^63 - 1)."""
    if not 0 <= budget_bytes <= MAX_BUDGET_BYTES:
        raise UsageError(f"{what} must be a non-negative number of bytes below 2^63, got {budget_bytes}")
    return budget_bytes


def check_budget_args(ratio: float | None, budget_bytes: int | None) -> None:
    """A command takes exactly one of a ratio and a byte budget; say which mistake was made."""
    if (ratio is None) == (budget_bytes is None):
        raise UsageError("give exactly one of --ratio and --budget-bytes")
    if ratio is not None:
        parse_ratio(ratio)
    if budget_bytes is not None:
        check_budget_bytes(budget_bytes)


def budget_of(program: Program, ratio: float | None, budget_bytes: int | None) -> int:
    """The budget a command was given: from the ratio when there is one, else the bytes."""
    return budget_from_ratio(program, ratio) if ratio is not None else budget_bytes


@dataclass(frozen=True)
class Budget:
    """A budget as the user gave it: a ratio of the unbounded peak, or bytes (ratio None)."""

    ratio: float | None
    budget_bytes: int

    @property
    def label(self) -> str:
        return f"{self.ratio:g}" if self.ratio is not None else f"{self.budget_bytes} B"


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_budget(program: Program, text: str) -> Budget:
    """A budget in dtrlab's one notation (BUDGET_NOTATION): `0.104` and `1.0` are ratios,
    `1046362631` and `2GiB` bytes."""
    raw = str(text).strip()
    number = raw.rstrip("BbIiKkMmGgTt ")
    unit = raw[len(number):].strip().lower()
    try:
        d = Decimal(number)
    except InvalidOperation:
        raise UsageError(f"budget {text!r}: {BUDGET_NOTATION}") from None
    if not d.is_finite() or d <= 0:
        raise UsageError(f"budget {text!r} must be positive")
    if unit:
        if unit not in _UNITS:
            raise UsageError(f"budget {text!r}: unknown unit {unit!r} ({BUDGET_NOTATION})")
        return Budget(None, check_budget_bytes(int(d * _UNITS[unit]), f"budget {text!r}"))
    if "." in number or "e" in number.lower():
        ratio = float(number)
        return Budget(ratio, budget_from_ratio(program, ratio))
    return Budget(None, check_budget_bytes(int(d), f"budget {text!r}"))


def budget_from_ratio(program: Program, ratio: float | str) -> int:
    """budget_bytes = int(peak x ratio) in float arithmetic, as the reference computes it."""
    return check_budget_bytes(int(baseline(program).peak_bytes * parse_ratio(ratio)),
                              f"the budget of ratio {ratio} on {program.name}")




def load_for(source, trace: str | None, policy: str, runtime: str) -> Program:
    """The one trace of SOURCE a run of `policy` on `runtime` will take, the names checked first (a
    typo should not wait for a large trace)."""
    from ..trace import load_one

    check_compatible(get_policy(policy), get_runtime(runtime))
    return load_one(source, trace)


def compiled_available() -> bool:
    return cengine._cengine is not None


def check_compatible(policy: Policy, runtime: Runtime) -> None:
    needs = policy.needs & {NEIGHBORHOOD, EQ_CLASS}
    if needs and not runtime.optimized:
        raise UsageError(f"policy {policy.name} needs the e*/eq-class upkeep of an optimized runtime "
                         f"(eager-optimized or optimized), not {runtime.name}")


def remat_limit_ns(program: Program, overhead_limit: float | None) -> float:
    """The recompute at which a run stops as remat_limit: (overhead_limit - 1) x the baseline's
    compute (inf without a limit)."""
    if overhead_limit is None:
        return math.inf
    if overhead_limit < 1:
        raise UsageError(f"overhead limit must be at least 1, got {overhead_limit}")
    return baseline(program).compute_ns * (overhead_limit - 1)


def simulate(program: Program, budget_bytes: int | None, policy: str | Policy = DEFAULT_POLICY,
             runtime: str | Runtime = DEFAULT_RUNTIME, *, overhead_limit: float | None = None,
             instruments=None, seed: int = 0, engine: str = "auto", progress=None,
             progress_every: int = PROGRESS_EVERY) -> RunResult:
    """Run DTR on `program` under `budget_bytes` (None: unbounded) and return what it cost.

    overhead_limit: stop with outcome remat_limit once recompute exceeds
    (overhead_limit - 1) x baseline compute. instruments: an Instruments to observe the run (on
    either engine: the compiled one whenever it runs the policy and runtime, as without them).
    progress: a callback the engine calls every `progress_every` units of work (progress.py); when
    it raises (Ctrl-C) the run ends and RunInterrupted carries its figures so far.
    """
    pol, rt = get_policy(policy), get_runtime(runtime)
    check_compatible(pol, rt)
    if budget_bytes is not None:
        check_budget_bytes(budget_bytes, "budget")
    remat_limit = remat_limit_ns(program, overhead_limit)
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    note = cengine.unsupported(pol, rt) if engine != "python" else ""
    if engine == "c" and note:
        raise UsageError(f"the compiled engine is not available for this run: {note}")
    use_c = engine != "python" and not note
    budget = math.inf if budget_bytes is None else budget_bytes
    counters = None
    if use_c:
        try:
            if instruments is None:
                counters = cengine.run_compiled(program, budget_bytes, pol, rt, remat_limit, seed,
                                                progress=progress, progress_every=progress_every)
            else:
                counters = cengine.run_observed(program, budget_bytes, pol, rt, instruments, remat_limit, seed,
                                                progress=progress, progress_every=progress_every)
            name = "c"
        except cengine.ScoreOverflow as exc:
            note = f"{exc}: the Python engine's exact integers ran it"
            if engine == "c":
                raise UsageError(f"{exc}: the compiled engine cannot run it exactly; "
                                 "use --engine python (exact integers, slower)") from None
    if counters is None:  # the Python engine: exact integers of any size
        observer = instruments.observer(program) if instruments is not None else None
        eng = pyengine.Engine(program, budget, pol, rt, remat_limit, seed, observer)
        eng.progress, eng.progress_every = progress, progress_every
        interrupt = None
        try:
            outcome = eng.run()
        except pyengine.Interrupted as exc:
            outcome, interrupt = INTERRUPTED, exc.cause
        except KeyboardInterrupt as exc:  # Ctrl-C between two progress calls
            outcome, interrupt = INTERRUPTED, exc
        counters = dict(outcome=outcome, clock_ns=eng.clock, remat_ns=eng.remat_ns,
                        evictions=eng.evictions, eager_evictions=eng.eager_evictions,
                        distinct_evicted=len(eng.evicted_roots), peak_bytes=eng.peak,
                        score_evals=eng.score_evals)
        name = "python"
        if interrupt is not None:
            counters["interrupt"] = interrupt
        elif observer is not None:
            counters["observations"] = observer.finish(eng, outcome)
    interrupt = counters.pop("interrupt", None)
    result = result_of(program, budget_bytes, pol, rt, counters, name, note or "")
    if result.outcome == INTERRUPTED:
        raise RunInterrupted(result) from interrupt
    return result


def result_of(program: Program, budget_bytes: int | None, policy: Policy, runtime: Runtime, counters: dict,
              engine: str, note: str = "") -> RunResult:
    """The RunResult of a run whose engine gave `counters` (outcome, clock_ns, remat_ns, ...)."""
    base = baseline(program)
    return RunResult(baseline_compute_ns=base.compute_ns, baseline_peak_bytes=base.peak_bytes,
                     budget_bytes=budget_bytes, policy=policy.name, runtime=runtime.name, engine=engine,
                     trace=program.name, engine_note=note, **counters)
