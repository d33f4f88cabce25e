"""What `dtrlab reproduce` runs: policies, budget grids, study windows, and the --quick cut of them.

Owns Plan (a frozen value), the two plans (full and quick) and which traces a plan takes; nothing
here simulates. A plan looks at what a trace is (its content hash, its operators), never at its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from ..defaults import (COARSE_RATIOS, DEFAULT_POLICY, DEFAULT_RUNTIME, DEFAULT_SWITCH_FACTOR,  # noqa: F401 - re-exported
                        PAPER_POLICIES, REPORT_OVERHEAD_LIMIT)
from ..sim.policies import REMEDY_POLICIES
from ..sweep.grid import parse_ratios, ratio_literal
from ..trace.lower import Program
from .study import STUDY_TRACES

# The policy whose fine curves the study's claims are about (the paper's DTR heuristic).
SUBJECT_POLICY = DEFAULT_POLICY
RUNTIME = DEFAULT_RUNTIME
# A switch is two neighbouring feasible budgets whose overheads differ by more than this.
SWITCH_FACTOR = DEFAULT_SWITCH_FACTOR
# Each round of refinement puts this many ratios between two neighbours: 0.1 -> 0.01 -> 0.001 (FINE_STEP).
REFINE_POINTS = 9
# The fine grid's step: 0.1 % of the unconstrained peak, the spacing at which the study states its
# claims ("budgets 0.10% of peak memory apart"). Two budgets at most this far apart are neighbouring
# fine budgets; compared as decimal literals, so 0.265 and 0.266 are neighbours without a tolerance.
FINE_STEP = Decimal("0.001")


def fine_neighbours(lo_ratio: float, hi_ratio: float) -> bool:
    """Whether two ratios (lo first) are neighbouring fine budgets: at most FINE_STEP apart."""
    return ratio_literal(hi_ratio) - ratio_literal(lo_ratio) <= FINE_STEP


@dataclass(frozen=True)
class Plan:
    """One reproduction's scope. windows: trace sha256 -> a ratio spec scanned finely with the
    subject policy (the study's claims name these windows, on the study's traces)."""

    name: str
    policies: tuple[str, ...]
    coarse_ratios: str
    windows: dict = field(default_factory=dict)
    # These policies' curves (coarse grid and windows) are refined down to FINE_STEP wherever two
    # neighbours differ in outcome or by more than SWITCH_FACTOR in overhead (report.refine).
    refine_policies: tuple[str, ...] = (SUBJECT_POLICY,)
    ablation_half_width: str = "0.005"  # the ablation window: this far either side of the switch
    timeout_s: float = 120.0  # per run: a safety net; the overhead cap bounds almost every run
    max_oom_explanations: int = 24
    max_pairs: int = 40  # neighbouring fine switches whose churn is measured (two runs each)
    # An OOM is explained by a replay on the Python engine, whose time grows with the scores it
    # evaluates (15-60 us each): skip runs past this many. A count, not a time, so what a report
    # explains does not depend on the machine or on how fast the compiled engine is.
    max_explain_score_evals: int = 500_000
    # The OOMs of one inversion are neighbouring budgets that run out of memory alike: the first is
    # always replayed (within the limit above), the next ones while the inversion's replays add up to
    # at most this many score evaluations. The public ResNet-32's five (28,115 each) all fit, so
    # claim (b2) reads every one of them; the shipped captures' (120,000-160,000 each) get one replay
    # an inversion instead of five, which took half of `make demo`'s time.
    max_inversion_score_evals: int = 200_000
    # Quick runs: the smallest traces (by operators) while their operators add up to at most this;
    # the smallest is always taken, so any trace a user gives gets a study. None: every trace.
    max_total_operators: int | None = None
    # Look closely only at switches between neighbouring fine budgets; a coarse switch's window
    # of ablations can be hundreds of runs (quick runs have fine scans on the study's resnet32 only).
    focus_fine_only: bool = False
    overhead_limit: float = REPORT_OVERHEAD_LIMIT
    # What `--seed` and `--engine` give every run the plan sweeps. The seed decides the policies that
    # draw (random, NAME+sample); the subject policy draws nothing, so its close looks (churn,
    # divergence, mechanisms) read neither. Results never depend on the engine.
    seed: int = 0
    engine: str = "auto"
    # Only these traces (sha256s; empty: every trace the source has, cut by max_total_operators).
    traces: tuple[str, ...] = ()
    # Ranked beside `policies` in the leaderboard (report.leaderboard), over the coarse grid and the
    # windows: the remedies dtrlab ships for the study's pathologies.
    remedies: tuple[str, ...] = REMEDY_POLICIES
    # Run the zoo's steps live under budgets beside their simulations (report.live), when torch is
    # installed: about 10 s on the 2-core machine.
    live: bool = False
    # With --optimal (report.baselines): traces of at most this many operators get the exact solve,
    # larger ones the crossing bound alone (ResNet-32 has 509, U-Net 399; the LSTM's 8,063 would make a
    # model of tens of millions of variables). None: every trace the exact solve.
    optimal_max_operators: int | None = 1_000

    @property
    def ranks(self) -> bool:
        """Whether the report has a leaderboard: its mean overheads are over the coarse grid."""
        return bool(self.coarse_ratios)

    def coarse(self) -> tuple[float, ...]:
        return parse_ratios(self.coarse_ratios) if self.coarse_ratios else ()

    def window(self, program: Program) -> tuple[float, ...]:
        spec = self.windows.get(program.sha256)
        return parse_ratios(spec) if spec else ()

    def choose(self, programs: list[Program]) -> list[Program]:
        """The traces this plan studies, in the source's order."""
        if self.traces:
            programs = [p for p in programs if p.sha256 in self.traces]
        if self.max_total_operators is None or not programs:
            return list(programs)
        by_size = sorted(range(len(programs)), key=lambda k: (programs[k].n_ops, k))
        kept, total = [], 0
        for k in by_size:
            if kept and total + programs[k].n_ops > self.max_total_operators:
                break
            kept.append(k)
            total += programs[k].n_ops
        return [programs[k] for k in sorted(kept)]


FULL = Plan(
    name="full",
    policies=PAPER_POLICIES,
    coarse_ratios=COARSE_RATIOS,
    # The LSTM's switches between 0.26 and 0.34 at 0.1 % steps, and the ResNet-32 inversion's window.
    # The whole LSTM curve at 0.1 % steps takes about 2 min on 2 cores (`dtrlab sweep`; runs
    # between 0.17 and 0.27 thrash), so the full plan scans the stretch the claims are about.
    windows={STUDY_TRACES["lstm"]: "0.26:0.34:0.001", STUDY_TRACES["resnet32"]: "0.090:0.120:0.001"},
    timeout_s=60.0,
    ablation_half_width="0.003",
    live=True,
)

# CI: the smallest traces and the cheaper policies; the study's windows cut to their interesting part.
QUICK = Plan(
    name="quick",
    policies=("dtr", "msps", "lru"),
    # The public traces' three smallest (unet, resnet32, inceptionv4: 3,215 operators; with the
    # next, 6,140); the public LSTM (8,063 operators, 1-10 s a budget) is too slow for CI. The
    # shipped captures' four smallest (4,357: the LSTM's 2,567 include its views' moves).
    max_total_operators=4_500,
    coarse_ratios="0.1:1.0:0.1",
    windows={STUDY_TRACES["resnet32"]: "0.099:0.109:0.001"},
    ablation_half_width="0.002",
    focus_fine_only=True,
    timeout_s=20.0,
    max_oom_explanations=6,
    max_pairs=6,
)

# The claims alone, on the study's two traces: what (a1)-(a3), (b1), (b2) and (c) read and nothing
# else. The LSTM's fine window holds the study's fast run (0.265 on the public LSTM), its slow
# neighbours on both sides and theirs; ResNet-32's holds the inversion; the ablation looks at the pairs'
# budgets. No coarse curves, no other policy: a CI test runs it on the public traces in well under a minute.
CLAIMS = Plan(
    name="claims",
    policies=(SUBJECT_POLICY,),
    coarse_ratios="",
    traces=(STUDY_TRACES["lstm"], STUDY_TRACES["resnet32"]),
    windows={STUDY_TRACES["lstm"]: "0.263:0.268:0.001", STUDY_TRACES["resnet32"]: "0.100:0.108:0.001"},
    ablation_half_width="0",  # the pairs' own budgets: both sides of the fast run
    focus_fine_only=True,
    timeout_s=60.0,
    max_pairs=2,  # the study's pairs: the fast run and its slow neighbour on each side
)
