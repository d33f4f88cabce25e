"""`dtrlab reproduce`: the whole study from traces to a report, every run through the sweep store.

Owns the order of the stages (coarse curves, fine scans, analyses, claims, figures, files) and Reproduction.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import pandas as pd

from ..analysis.ablation import AblationRow
from ..analysis.churn import Churn, compare_runs
from ..analysis.divergence import Divergence
from ..analysis.feasibility import inversions
from ..analysis.oom import OomReport, report_of
from ..analysis.regimes import Switch, switches
from ..analysis.scan import Budget
from ..capture.peakgap import PeakGap, peak_gaps
from ..errors import UsageError
from ..optimal.defaults import SolveSettings
from ..output import Ticker
from ..output import console as _console
from ..sim.instruments import Instruments
from ..sim.policies import ablation_policies
from ..sim.result import OOM
from ..sim.simulate import baseline, simulate
from ..sweep.grid import RunSpec, build_specs, ratio_literal
from ..sweep.run import SweepSummary, run_sweep
from ..sweep.store import Store, export
from ..trace import load, shipped_traces
from ..trace.lower import Program
from .findings import Curve, StudyPair, curves, largest_switch, runs_of, study_pair
from .leaderboard import Leaderboard
from .mechanisms import divergence_of, mechanisms_of, pair_count, prefetch_divergences, runs_read
from .memo import code_digest, memo
from .refine import refine_to_fine
from .plan import FINE_STEP, FULL, QUICK, RUNTIME, SUBJECT_POLICY, SWITCH_FACTOR, Plan
from .runfacts import counted, counts_of, keeping, prefetch
from .study import SHIPPED, STUDY_TRACES

if TYPE_CHECKING:
    from rich.console import Console

STORE_NAME = "dtrlab-results.duckdb"


@dataclass(frozen=True)
class Focus:
    """The largest switch of the subject policy, looked at closely: churn, histograms, divergence."""

    trace: str
    policy: str
    switch: Switch
    churn: Churn
    per_storage_fast: np.ndarray  # all evictions (policy + eager) of each storage evicted at least once
    per_storage_slow: np.ndarray
    divergence: Divergence | None


@dataclass(frozen=True)
class PairChurn:
    """A switch between neighbouring fine budgets, with the churn figures the study quotes
    (all evictions: the policy's and the eager ones at last release)."""

    trace: str
    switch: Switch
    per_storage_fast: float  # evictions per evicted storage
    per_storage_slow: float
    distinct_fast: int  # storages evicted at least once
    distinct_slow: int
    jaccard: float  # of the two evicted sets

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "switch"}
        return {**d, **self.switch.to_dict()}


@dataclass(frozen=True)
class OomCase:
    """One infeasible budget explained; series: [clock_ns, bytes] rows of the run (figures only)."""

    trace: str
    policy: str
    ratio: float | None
    report: OomReport
    series: np.ndarray | None
    inversion: int  # index of the inversion of its curve it belongs to


@dataclass(frozen=True)
class Ablation:
    """The 16 ab-* policies over a window of budgets around the focus."""

    trace: str
    ratios: tuple[float, ...]
    rows: tuple[AblationRow, ...]
    curves: dict  # policy -> Curve over the window


@dataclass(frozen=True)
class Reproduction:
    """Everything the report shows, computed from the store."""

    source: str
    plan: Plan
    out_dir: Path
    traces: tuple[dict, ...]  # name, sha256, peak_bytes, compute_ns, operators
    frame: pd.DataFrame  # every run of this reproduction (store rows)
    curves: dict  # (trace, policy) -> Curve
    focus: Focus | None
    ablation: Ablation | None
    ooms: tuple[OomCase, ...]
    skipped_ooms: tuple[str, ...]  # why some infeasible budgets were not explained
    pairs: tuple[PairChurn, ...] = ()  # churn of every neighbouring fine switch of the study's traces
    study_pair: StudyPair | None = None  # the study's LSTM pairs (a1-a3, c), when the study's LSTM is here
    mechanisms: tuple = ()  # analysis.mechanism.Signature of every switch and inversion of the subject policy
    claims: tuple = ()
    beside: tuple = ()  # report.claims.Beside: findings beside the claims, never their verdicts
    leaderboard: Leaderboard | None = None  # the policies ranked (report.leaderboard); None: the plan ranks none
    figures: dict = field(default_factory=dict)  # name -> (png path, svg path)
    new_runs: int = 0  # simulated by this call; the rest were in the store
    new_solves: int = 0  # the solver's runs (reproduce --optimal) made by this call; apart from `frame`
    peaks: tuple[PeakGap, ...] = ()  # traces that carry a recorder peak (captures): the three peaks
    timelines: object = None  # report.timelines.Timelines: files written next to report.html, switch series
    live: object = None  # report.live.LiveSection: the zoo run live against the simulator (None: the plan runs none)
    baselines: object = None  # report.baselines.Baselines: DTR beside the solver's rows the store holds
    checkpointing: object = None  # report.checkpointing.CheckpointingSection (None: not asked for, --checkpointing)
    left_out: tuple[dict, ...] = ()  # the source's traces the plan does not run: name, sha256, operators
    timings: dict = field(default_factory=dict)  # stage -> seconds (run.json, not the report: it varies)
    wall_s: float = 0.0


@contextlib.contextmanager
def trace_source(source: str | None) -> Iterator[tuple[str, str]]:
    """(path to load from, label for the report): SOURCE itself, or the traces inside dtrlab."""
    if source is not None:
        if not Path(source).exists():
            raise UsageError(f"{source}: no such file or folder")
        yield str(Path(source).resolve()), str(source)
        return
    yield shipped_traces(), SHIPPED




def _window(center_lo: float, center_hi: float, half_width: str) -> tuple[float, ...]:
    """Fine-grid ratios (FINE_STEP apart) from lo - half to hi + half, as exact decimal literals."""
    step, half = FINE_STEP, Decimal(half_width)
    lo = (ratio_literal(center_lo) - half).quantize(step)
    hi = (ratio_literal(center_hi) + half).quantize(step)
    lo = max(lo, step)
    out, r = [], lo
    while r <= hi:
        out.append(float(str(r)))
        r += step
    return tuple(out)


# The job's stages, in order; the progress line numbers each "k/n" with n the length of this list.
STAGES = ("reading traces", "coarse curves", "fine scans around every switch and failure",
          "churn and first divergence of the focus", "ablation table (16 ab-* policies)",
          "explaining every inversion's out-of-memory", "churn of every neighbouring fine switch",
          "leaderboard of the policies", "mechanism of every switch and inversion",
          "optimal baselines: the solver's best schedules and bounds (solved with --optimal)",
          "timelines of the focus switch and an out-of-memory",
          "live runs: the zoo's steps under budgets in PyTorch (with torch)",
          "checkpointing: staged DTR beside PyTorch's own (with --checkpointing)", "claims of the study",
          "figures, report.html, summary.md, results.parquet")


class _Stages:
    """Rich output of the job: a numbered line per stage (of STAGES) and the time each took."""

    def __init__(self, console: Console, names: tuple[str, ...] = STAGES, progress: bool = True) -> None:
        self.console, self.names, self.progress = console, names, progress
        self.timings: dict[str, float] = {}

    def ticker(self, what: str, total: int | None = None) -> Ticker:
        """Progress inside a stage with no bar of its own (output.Ticker)."""
        return Ticker(self.console, what, total, self.progress)

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = ""):
        k = self.names.index(name) + 1  # a name not in the list is a bug: ValueError
        self.console.rule(f"[bold]{k}/{len(self.names)}[/bold] {name}{detail}", align="left")
        t0 = time.perf_counter()
        yield  # the sweeps inside draw their own progress bars (rich allows one live display)
        self.timings[name] = time.perf_counter() - t0
        self.console.print(f"  done in {self.timings[name]:.1f} s", style="dim")


def _programs(path: str, plan: Plan) -> tuple[list[Program], tuple[dict, ...]]:
    """The traces of `path` that the plan studies, lowered (through the cache), in the source's order;
    and those it leaves out (name, sha256, operators), so the report can say they were in the source."""
    every = load(path)
    chosen = plan.choose(every)
    taken = {p.sha256 for p in chosen}
    return chosen, tuple({"name": p.name, "sha256": p.sha256, "operators": p.n_ops}
                         for p in every if p.sha256 not in taken)


def _sweep_summary(specs: list[RunSpec], store: Store, plan: Plan, workers: int | None,
                   progress: bool) -> SweepSummary:
    return run_sweep(specs, store, workers=workers, timeout_s=plan.timeout_s, progress=progress, report=False)


def _sweep(specs: list[RunSpec], store: Store, plan: Plan, workers: int | None, progress: bool) -> int:
    """Run the specs the store lacks; the number simulated now."""
    return _sweep_summary(specs, store, plan, workers, progress).ran if specs else 0


def reproduce(source: str | None = None, out_dir: str | Path = "dtrlab-report", *, quick: bool = False,
              workers: int | None = None, console: Console | None = None, progress: bool = True,
              plan: Plan | None = None, policies: tuple[str, ...] = (),
              optimal: SolveSettings | None = None, overhead_limit: float | None = None,
              seed: int | None = None, engine: str | None = None, checkpointing: bool = False) -> Reproduction:
    """Run the study on SOURCE (None: the shipped traces) and write the report into out_dir;
    `plan` (default: the quick or the full plan) says what is run; `policies` (names, formulas) join
    its leaderboard; `optimal` (default: none) solves the coarse grid and the study's windows under
    those settings first (report.baselines). The baselines section reads whatever solver rows the
    store holds either way. overhead_limit, seed and engine (None: the plan's) replace the plan's.
    `checkpointing` also runs the zoo's steps beside PyTorch's own checkpointing (report.checkpointing:
    minutes, with torch)."""
    from .write import write_run_record

    plan = plan or (QUICK if quick else FULL)
    given = dict(overhead_limit=overhead_limit, seed=seed, engine=engine)
    plan = replace(plan, **{k: v for k, v in given.items() if v is not None})
    console = console or _console(stderr=True)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a folder")
    t_start = time.perf_counter()
    stages = _Stages(console, progress=progress)
    with trace_source(source) as (path, label):
        with stages.stage("reading traces"):
            programs, left_out = _programs(path, plan)  # a bad trace fails here, before the folder is made
            peaks = peak_gaps(path, {p.sha256 for p in programs})
        created = not out.exists()
        out.mkdir(parents=True, exist_ok=True)
        try:
            repro = _study(path, label, plan, programs, peaks, out, stages, workers, progress, tuple(policies),
                           left_out, optimal, checkpointing)
        except BaseException:
            if created:  # a failure leaves no empty folder behind; one with runs in it stays
                with contextlib.suppress(OSError):
                    out.rmdir()
            raise
    repro = replace(repro, timings=dict(stages.timings), wall_s=time.perf_counter() - t_start)
    write_run_record(repro)
    return repro


def _study(path: str, label: str, plan: Plan, programs: list[Program], peaks: tuple[PeakGap, ...], out: Path,
           stages: _Stages, workers: int | None, progress: bool, extra: tuple[str, ...] = (),
           left_out: tuple[dict, ...] = (), optimal: SolveSettings | None = None,
           checkpointing: bool = False) -> Reproduction:
    from . import leaderboard
    from .baselines import baselines, dtr_specs, optimal_specs
    from .claims import beside_claims, evaluate
    from .write import write_all

    by_sha = {p.sha256: p for p in programs}
    by_name = {p.name: p for p in programs}
    traces = tuple({"name": p.name, "sha256": p.sha256, "peak_bytes": baseline(p).peak_bytes,
                    "compute_ns": baseline(p).compute_ns, "operators": p.n_ops} for p in programs)
    new_runs = new_solves = 0
    store = Store(out / STORE_NAME)
    try:
        limit = dict(overhead_limit=plan.overhead_limit, seed=plan.seed, engine=plan.engine)
        with stages.stage("coarse curves", f": {len(plan.policies)} policies x {len(plan.coarse())} budgets"):
            coarse = plan.coarse()  # none in a plan of fine windows only
            # The subject policy's runs keep their facts as they run: churn and mechanisms read them.
            specs = (keeping(build_specs(path, programs, plan.policies, [RUNTIME], coarse, **limit), out)
                     if coarse else [])
            new_runs += _sweep(specs, store, plan, workers, progress)
        ranked = list(specs)  # what the leaderboard reads: the coarse curves, the windows, its own runs
        with stages.stage("fine scans around every switch and failure", f" ({FINE_STEP} steps)"):
            # Every trace's window in one sweep: no trace waits for the last run of another.
            new = keeping([s for program in programs if plan.window(program)
                           for s in build_specs(path, [program], [SUBJECT_POLICY], [RUNTIME], plan.window(program),
                                                **limit)], out)
            new_runs += _sweep(new, store, plan, workers, progress)
            specs += new
            ranked += new
            specs = list({s.key: s for s in specs}.values())  # a window can hold coarse budgets
            # Then every refined curve, windows included, down to the fine grid wherever two neighbours
            # differ: nothing below names a switch or an inversion across budgets that were not run.
            refinable = [s for s in specs if s.policy in plan.refine_policies]
            refined = refine_to_fine(refinable, store, by_sha,
                                     lambda _, new: _sweep_summary(new, store, plan, workers, progress))
            new_runs += refined.ran
            specs += refined.specs[len(refinable):]
        frame = store.rows(s.key for s in specs)
        found = curves(frame, SWITCH_FACTOR)

        lstm = next((p for p in programs if p.sha256 == STUDY_TRACES["lstm"]), None)
        pair = None
        if lstm is not None:  # in the plan's window of the study's LSTM, where the study's claims are
            window = plan.window(lstm)
            pair = study_pair(found, lstm.name, SUBJECT_POLICY, (min(window), max(window)) if window else None)
        # The study's pairs are the focus (churn, divergence, ablation) when there are any: the claims'
        # figures and the report's close look are then of the same runs.
        focus_switch = ((pair.trace, pair.largest) if pair is not None
                        else largest_switch(found, SUBJECT_POLICY, fine_only=plan.focus_fine_only))
        focus = None
        with stages.stage("churn and first divergence of the focus"):
            if focus_switch is not None:
                focus = _focus(out, by_name[focus_switch[0]], focus_switch[1], plan.overhead_limit)
        ablation = None
        with stages.stage("ablation table (16 ab-* policies)"):
            center = _ablation_center(found, focus_switch, pair)
            if center is not None:
                trace, lo, hi = center
                # Around both ends: a switch or inversion across a coarse gap is no 100-budget window.
                ratios = tuple(sorted(set(_window(lo, lo, plan.ablation_half_width)
                                          + _window(hi, hi, plan.ablation_half_width))))
                names = [p.name for p in ablation_policies()]
                new = build_specs(path, [by_name[trace]], names, [RUNTIME], ratios, **limit)
                new_runs += _sweep(new, store, plan, workers, progress)
                ab_frame = store.rows(s.key for s in new)
                frame = pd.concat([frame, ab_frame], ignore_index=True)
                ablation = _ablation(trace, ratios, ab_frame)
        with stages.stage("explaining every inversion's out-of-memory"):
            ooms, skipped = _explain_inversions(out, found, by_name, frame, plan)
        with stages.stage("churn of every neighbouring fine switch", " (simulating the runs it and the mechanisms read)"):
            survey = _pair_survey(found, plan, pair)
            wanted = [(by_name[t], run) for t, sw in survey for run in (sw.fast, sw.slow)]
            with stages.ticker("runs the analyses read") as ticker:
                prefetch(out, wanted + runs_read(found, by_name), plan.overhead_limit, workers, ticker.tick)
            pairs = _pair_churn(out, survey, by_name, plan)
        board = None
        with stages.stage("leaderboard of the policies"):
            if plan.ranks:
                new = leaderboard.specs(path, programs, plan, extra, **limit)
                new_runs += _sweep(new, store, plan, workers, progress)
                board = leaderboard.build(store.rows(s.key for s in ranked + new), plan, extra,
                                          sum(bool(plan.window(p)) for p in programs))
                frame = pd.concat([frame, store.rows(s.key for s in new)], ignore_index=True)
        with stages.stage("mechanism of every switch and inversion"):
            with stages.ticker("first divergences") as ticker:
                prefetch_divergences(out, found, by_name, plan, workers, ticker.tick)
            with stages.ticker("switches and inversions", pair_count(found)) as ticker:
                mechs = mechanisms_of(out, found, by_name, ooms, plan, ticker.tick)
        with stages.stage("optimal baselines: the solver's best schedules and bounds (solved with --optimal)"):
            if optimal is not None:
                beside = dtr_specs(path, programs, plan, **limit)
                new_runs += _sweep(beside, store, plan, workers, progress)
                have = set(frame["key"])
                frame = pd.concat([frame, store.rows(s.key for s in beside if s.key not in have)], ignore_index=True)
                # No per-run timeout: the solver's own time limit bounds each solve (the plan's timeout is
                # for simulations, and would cut a solve short of its limit).
                solves = optimal_specs(path, programs, plan, optimal)
                if solves:
                    new_solves = run_sweep(solves, store, workers=workers, progress=progress, report=False).ran
            section = baselines(traces, store.rows(), plan.overhead_limit, plan.seed)
    finally:
        store.close()

    with stages.stage("timelines of the focus switch and an out-of-memory"):
        from .timelines import write_timelines

        with stages.ticker("timelines") as ticker:
            written = write_timelines(out, by_name, focus, ooms, plan.engine, ticker.tick)
    live = None
    with stages.stage("live runs: the zoo's steps under budgets in PyTorch (with torch)"):
        if plan.live:
            from .live import decided_by, live_runs, live_section

            def run_live():
                with stages.ticker("live steps", live_runs()) as ticker:
                    return live_section(ticker.tick)
            live = memo(out, "live", {**decided_by(), "code": code_digest()}, run_live)
    compared = None
    with stages.stage("checkpointing: staged DTR beside PyTorch's own (with --checkpointing)"):
        if checkpointing:
            compared = _checkpointing(out, stages)
    repro = Reproduction(label, plan, out, traces, frame, found, focus, ablation, ooms, skipped, pairs,
                         study_pair=pair, leaderboard=board, mechanisms=mechs, new_runs=new_runs,
                         new_solves=new_solves, peaks=peaks, timelines=written, live=live, left_out=left_out,
                         baselines=section, checkpointing=compared)
    with stages.stage("claims of the study"):
        repro = replace(repro, claims=tuple(evaluate(repro)), beside=tuple(beside_claims(repro)))
    with stages.stage("figures, report.html, summary.md, results.parquet"):
        export(out / STORE_NAME, "parquet", out / "results.parquet")
        with stages.ticker("figures") as ticker:
            repro = replace(repro, figures=write_all(repro, ticker.tick, workers))
    return repro


def _checkpointing(out: Path, stages: _Stages):
    """The checkpointing section, kept in the report folder's memo (a tick a model)."""
    from .checkpointing import checkpointing_section, decided_by, default_setups

    def run():
        with stages.ticker("models compared", len(default_setups())) as ticker:
            return checkpointing_section(ticker.tick)
    return memo(out, "checkpointing", {**decided_by(), "code": code_digest()}, run)


# --- the analyses ---------------------------------------------------------------------------


def _ablation_center(found: dict, focus_switch, pair: StudyPair | None) -> tuple[str, float, float] | None:
    """Where the ablation looks: the study's pairs, else the largest switch, else the subject policy's
    first inversion."""
    if pair is not None:  # every pair of the study's fast run, both sides
        ratios = [r.ratio for s in pair.switches for r in (s.lo, s.hi)]
        return pair.trace, min(ratios), max(ratios)
    if focus_switch is not None:
        t, s = focus_switch
        return t, min(s.lo.ratio, s.hi.ratio), max(s.lo.ratio, s.hi.ratio)
    for (t, p), curve in found.items():
        if p == SUBJECT_POLICY and curve.inversions:
            inv = curve.inversions[0]
            return t, inv.last_feasible.ratio, inv.next_feasible.ratio
    return None


def _ablation(trace: str, ratios: tuple[float, ...], frame: pd.DataFrame) -> Ablation:
    rows, per_policy = [], {}
    for policy in [p.name for p in ablation_policies()]:
        runs = runs_of(frame[frame["policy"] == policy])
        per_policy[policy] = Curve(trace, policy, runs, SWITCH_FACTOR)
        sw, inv = switches(runs, SWITCH_FACTOR), inversions(runs)
        ok = [r for r in runs if r.feasible]
        rows.append(AblationRow(policy, len(runs), len(ok), min((r.ratio for r in ok), default=None), len(sw),
                                max((s.factor for s in sw), default=None), len(inv),
                                sum(len(i.infeasible) for i in inv)))
    return Ablation(trace, ratios, tuple(rows), per_policy)


def _pair_survey(found: dict, plan: Plan, pair: StudyPair | None) -> list[tuple[str, Switch]]:
    """The fine switches of the subject policy whose churn the report gives: the study's pair first,
    then the largest, at most plan.max_pairs of them (the study's pair always among them)."""
    survey = []
    for (trace, policy), curve in sorted(found.items()):
        if policy == SUBJECT_POLICY:
            survey += [(trace, s) for s in curve.fine_switches()]
    first = [(pair.trace, s) for s in pair.switches] if pair is not None else []
    survey = first + [ts for ts in sorted(survey, key=lambda ts: -ts[1].factor) if ts not in first]
    return survey[:max(plan.max_pairs, len(first))]


def _pair_churn(out: Path, survey: list[tuple[str, Switch]], by_name: dict, plan: Plan) -> tuple[PairChurn, ...]:
    """Each switch of the survey with all-eviction churn figures (from the runs' facts)."""
    def evicted(program: Program, run) -> np.ndarray:
        arrays = counts_of(out, program, run, plan.overhead_limit)
        return arrays["policy_evictions"] + arrays["eager_evictions"]

    pairs = []
    for trace, sw in survey:
        program = by_name[trace]
        fast, slow = evicted(program, sw.fast), evicted(program, sw.slow)
        a, b = fast > 0, slow > 0
        union = int((a | b).sum())
        pairs.append(PairChurn(trace, sw, float(fast.sum() / max(a.sum(), 1)), float(slow.sum() / max(b.sum(), 1)),
                               int(a.sum()), int(b.sum()), float((a & b).sum() / union) if union else 1.0))
    return tuple(sorted(pairs, key=lambda pc: (pc.trace, pc.switch.lo.budget_bytes)))


def _evictions_per_storage(arrays: dict) -> np.ndarray:
    every = arrays["policy_evictions"] + arrays["eager_evictions"]
    return every[every > 0]


def _focus(out: Path, program: Program, sw: Switch, overhead_limit: float) -> Focus:
    """The focus switch's churn, its runs' evictions per storage and its first divergence: from the
    runs' facts (kept as the sweep ran them) where there are facts, else simulated here."""
    fast, slow = sw.fast, sw.slow
    a, b = Budget(fast.ratio, fast.budget_bytes), Budget(slow.ratio, slow.budget_bytes)
    key = {"trace": program.sha256, "a": a.budget_bytes, "b": b.budget_bytes, "policy": SUBJECT_POLICY}

    def churn_and_histograms():
        counts = tuple(counted(out, program, run, overhead_limit) for run in (fast, slow))
        churn = compare_runs(program, a, b, SUBJECT_POLICY, RUNTIME, counts=counts)
        return churn, _evictions_per_storage(counts[0][1]), _evictions_per_storage(counts[1][1])

    churn, h_fast, h_slow = memo(out, "churn", key, churn_and_histograms)
    return Focus(program.name, SUBJECT_POLICY, sw, churn, h_fast, h_slow,
                 divergence_of(out, program, overhead_limit)(fast, slow))


def _explain(program: Program, budget_bytes: int, policy: str, seed: int) -> tuple[OomReport, np.ndarray]:
    res = simulate(program, budget_bytes, policy, RUNTIME, seed=seed,
                   instruments=Instruments(per_storage=False, memory_series=True, oom_snapshot=True))
    if res.outcome != OOM:  # cannot happen for a stored oom; a bug if it does
        raise RuntimeError(f"{program.name} {policy} at {budget_bytes} B: outcome {res.outcome}, expected oom")
    return report_of(program, res.observations.oom, res.policy, res.runtime), res.observations.memory_series


def _explain_inversions(out: Path, found: dict, by_name: dict, frame: pd.DataFrame,
                        plan: Plan) -> tuple[tuple[OomCase, ...], tuple[str, ...]]:
    """One OOM per inversion (every one of the subject policy's), the subject policy first,
    within the plan's count and per-run time limits."""
    evals = {(r.trace, r.policy, int(r.budget_bytes)): int(r.score_evals)
             for r in frame.itertuples(index=False) if r.outcome == OOM}
    todo = []
    order = sorted(found.items(), key=lambda kv: (kv[0][1] != SUBJECT_POLICY, kv[0]))
    for (trace, policy), curve in order:
        for k, inv in enumerate(curve.inversions):
            ooms = [r for r in inv.infeasible if r.outcome == OOM]
            todo += [(trace, policy, k, r) for r in (ooms if policy == SUBJECT_POLICY else ooms[:1])]
    cases, skipped = [], []
    spent: dict[tuple[str, str, int], int] = {}  # score evaluations replayed per inversion
    for trace, policy, k, run in todo:
        what = f"{trace} {policy} at ratio {run.label}"
        if len(cases) >= plan.max_oom_explanations:
            skipped.append(f"{what}: past the plan's {plan.max_oom_explanations} explanations")
            continue
        n_evals = evals.get((trace, policy, run.budget_bytes), 0)
        if n_evals > plan.max_explain_score_evals:
            skipped.append(f"{what}: {n_evals:,} score evaluations, past the plan's "
                           f"{plan.max_explain_score_evals:,} for a replay on the Python engine")
            continue
        inversion = (trace, policy, k)
        if inversion in spent and spent[inversion] + n_evals > plan.max_inversion_score_evals:
            skipped.append(f"{what}: a further OOM of an inversion already explained, past the plan's "
                           f"{plan.max_inversion_score_evals:,} score evaluations of replays per inversion")
            continue
        spent[inversion] = spent.get(inversion, 0) + n_evals
        program = by_name[trace]
        key = {"trace": program.sha256, "budget": run.budget_bytes, "policy": policy, "seed": plan.seed}
        report, series = memo(out, "oom", key, lambda: _explain(program, run.budget_bytes, policy, plan.seed))
        cases.append(OomCase(trace, policy, run.ratio, report, series, k))
    return tuple(cases), tuple(skipped)
