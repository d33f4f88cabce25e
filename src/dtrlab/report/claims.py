"""The study's claims, each checked against dtrlab's own runs: the figure measured and a verdict.

Owns Claim and evaluate(); the study's numbers live here as what is claimed, never as results.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..formats import overhead_text
from .findings import inversion_text
from .plan import SUBJECT_POLICY
from .study import STUDY_TRACES
from ..analysis.oom import frontier_text

REPRODUCED, DIFFERS, NOT_APPLICABLE = "reproduced", "differs", "not applicable to these traces"
SUPPORTED = "supported"  # a hypothesis the runs bear out
DEMONSTRATED, HYPOTHESIS = "demonstrated", "hypothesis"


@dataclass(frozen=True)
class Claim:
    """One claim of the study: what it says, what dtrlab measured, and whether they agree.

    kind: "demonstrated" (a measured fact of the runs) or "hypothesis" (an explanation the runs
    are consistent with or not, but cannot prove)."""

    key: str
    trace: str
    statement: str
    measured: str
    verdict: str
    kind: str
    evidence: dict

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _same(value: float, claimed: str) -> bool:
    """Equal at the precision the study states it (7.3 means 7.25 <= x < 7.35)."""
    digits = len(claimed.split(".")[1]) if "." in claimed else 0
    return f"{value:.{digits}f}" == claimed


def _study_trace(repro, name: str) -> tuple[dict | None, str | None]:
    """(the trace's info, None) when the study's trace is here, known by its sha256; else (None, why not)."""
    info = next((t for t in repro.traces if t["sha256"] == STUDY_TRACES[name]), None)
    if info is not None:
        return info, None
    skipped = next((t for t in repro.left_out if t["sha256"] == STUDY_TRACES[name]), None)
    if skipped is not None:
        how = " (run without --quick)" if repro.plan.name == "quick" else ""
        return None, (f"{NOT_APPLICABLE}: the {repro.plan.name} plan leaves out the study's {name} that this source "
                      f"holds ({skipped['name']}, {skipped['operators']:,} operators){how}")
    if any(t["name"] == name for t in repro.traces):
        return None, (f"{NOT_APPLICABLE}: this {name} is another trace than the study's "
                      f"(public DTR {name}, sha256 {STUDY_TRACES[name][:12]})")
    return None, f"{NOT_APPLICABLE}: no {name} trace in this run"


def _lstm(repro) -> list[Claim]:
    """(a1)-(a3) on one pair, the study's pair (findings.PAIR_RULE), chosen before any claim is looked at."""
    statement_a1 = ("LSTM: budgets 0.10% of peak apart select fast and slow regimes whose overheads "
                    "differ by up to 7.3x")
    statement_a2 = ("LSTM: in the slow regime evictions per evicted storage rise from 1.33 to 8.27 "
                    "(all evictions, policy + eager)")
    statement_a3 = ("LSTM: the set of evicted storages barely changes (5,233 vs 5,236, Jaccard 0.999)")
    info, why = _study_trace(repro, "lstm")
    sp = repro.study_pair
    churn = {(p.trace, p.switch): p for p in repro.pairs}
    pcs = [churn[(sp.trace, s)] for s in sp.switches if (sp.trace, s) in churn] if sp is not None else []
    if not pcs:
        none = ("the study's pairs are chosen on the study's LSTM only" if why else
                "no switch between neighbouring fine budgets measured")
        return [Claim(key, "lstm", st, none, why or DIFFERS, DEMONSTRATED, {})
                for key, st in zip(("a1", "a2", "a3"), (statement_a1, statement_a2, statement_a3))]
    figures = (  # per claim: the figure of one pair in words, and whether it is the study's
        (lambda pc: f"{pc.switch.factor:.2f}x (overhead {overhead_text(pc.switch.fast.overhead)} -> "
                    f"{overhead_text(pc.switch.slow.overhead)})",
         lambda pc: _same(pc.switch.factor, "7.3")),
        (lambda pc: f"{pc.per_storage_fast:.2f} -> {pc.per_storage_slow:.2f} evictions per evicted storage",
         lambda pc: _same(pc.per_storage_fast, "1.33") and _same(pc.per_storage_slow, "8.27")),
        (lambda pc: f"{pc.distinct_fast:,} vs {pc.distinct_slow:,} evicted storages, Jaccard {pc.jaccard:.3f}",
         lambda pc: (pc.distinct_fast, pc.distinct_slow) == (5233, 5236) and _same(pc.jaccard, "0.999")),
    )
    out = []
    for key, statement, (words, holds) in zip(("a1", "a2", "a3"), (statement_a1, statement_a2, statement_a3),
                                              figures):
        # a1 is "up to": the largest factor, the first pair; a2 and a3 on the pair that shows them, if one does.
        chosen = pcs[0] if key == "a1" else next((pc for pc in pcs if holds(pc)), pcs[0])
        measured = "; ".join(f"{words(pc)} on {sp.label(pc.switch)}" for pc in [chosen] + [p for p in pcs if p is not chosen])
        if key == "a1":
            measured += (f". The fast run: {sp.trace} at {sp.fast.ratio:g}, chosen as {sp.rule}; its switch is "
                         + (f"the largest of the fine window {sp.window_label}" if not sp.larger else
                            f"not the largest of the fine window {sp.window_label}: {len(sp.larger)} "
                            f"larger (listed beside the claims)"))
        evidence = chosen.to_dict() | {"pair": sp.label(chosen.switch), "pairs": sp.labels, "rule": sp.rule,
                                       "fast_ratio": sp.fast.ratio, "largest_in_window": not sp.larger,
                                       "larger": [sp.label(s) for s in sp.larger]}
        out.append(Claim(key, "lstm", statement, measured, why or (REPRODUCED if holds(chosen) else DIFFERS),
                         DEMONSTRATED, evidence))
    return out


def _resnet(repro) -> list[Claim]:
    statement_b1 = "ResNet-32: feasible at ratio 0.101, out of memory across 0.102-0.106, feasible again from 0.107"
    statement_b2 = ("ResNet-32: the OOM comes from a fully pinned recursive rematerialization frontier that "
                    "exceeds the budget after every evictable tensor is gone")
    info, why = _study_trace(repro, "resnet32")
    name = info["name"] if info is not None else "resnet32"
    inv = _resnet_inversion(repro, name)
    if inv is not None:
        oom_ratios = [r.ratio for r in inv.infeasible]
        measured_b1 = inversion_text(inv)
        ok_b1 = (inv.last_feasible.ratio == 0.101 and inv.next_feasible.ratio == 0.107
                 and oom_ratios == [0.102, 0.103, 0.104, 0.105, 0.106]
                 and all(r.outcome == "oom" for r in inv.infeasible))
        evidence_b1 = inv.to_dict()
    else:
        measured_b1, ok_b1, evidence_b1, inv = "no inversion between 0.09 and 0.12", False, {}, None
    cases = [c for c in repro.ooms if c.trace == name and c.policy == SUBJECT_POLICY and inv is not None
             and c.ratio in {r.ratio for r in inv.infeasible}]
    if cases:
        held = [c for c in cases if c.report.frontier_exceeds_budget]
        deepest = max(cases, key=lambda c: len(c.report.frames))
        r = deepest.report
        measured_b2 = (f"{len(held)} of {len(cases)} OOM budgets: evictable pool empty and pinned + locked + "
                       f"next compute exceed the budget; at {deepest.ratio:g}: {frontier_text(r)}")
        ok_b2 = len(held) == len(cases) and all(sum(f.remat for f in c.report.frames) > 0 for c in cases)
        evidence_b2 = {"explained": len(cases), "frontier_exceeds_budget": len(held),
                       "deepest": r.to_dict() | {"frames": len(r.frames), "holders": len(r.holders)}}
    else:
        measured_b2, ok_b2, evidence_b2 = "no OOM of that inversion explained", False, {}
    v1 = why or (REPRODUCED if ok_b1 else DIFFERS)
    v2 = why or (REPRODUCED if ok_b2 else DIFFERS)
    return [Claim("b1", "resnet32", statement_b1, measured_b1, v1, DEMONSTRATED, evidence_b1),
            Claim("b2", "resnet32", statement_b2, measured_b2, v2, DEMONSTRATED, evidence_b2)]


def _ablation_claim(repro) -> list[Claim]:
    statement = ("Ablations with the DTR authors' heuristic variants implicate the joint size x staleness term "
                 "in the LSTM instability")
    info, why = _study_trace(repro, "lstm")
    ab, sp = repro.ablation, repro.study_pair
    if ab is None or sp is None or ab.trace != sp.trace:
        none = "the ablation looks around the study's pairs, on the study's LSTM only" if why else (
            "no ablation around the study's pairs")
        return [Claim("c", "lstm", statement, none, why or DIFFERS, HYPOTHESIS, {})]
    both = [r for r in ab.rows if r.policy.endswith("-size-stale")]
    others = [r for r in ab.rows if not r.policy.endswith("-size-stale")]
    unstable = lambda r: r.switches > 0 or r.inversions > 0  # noqa: E731
    n_both, n_other = sum(map(unstable, both)), sum(map(unstable, others))
    measured = (f"window {ab.ratios[0]:g}-{ab.ratios[-1]:g} around the same pairs ({sp.labels}): switches or inversions in {n_both} of {len(both)} "
                f"variants with size x staleness ({', '.join(r.policy for r in both if unstable(r)) or 'none'}), "
                f"in {n_other} of {len(others)} without it "
                f"({', '.join(r.policy for r in others if unstable(r)) or 'none'})")
    # Implicated: the instability needs both terms (present with them, absent without).
    verdict = why or (REPRODUCED if n_both > 0 and n_other == 0 else DIFFERS)
    return [Claim("c", "lstm", statement, measured, verdict, HYPOTHESIS,
                  {"rows": [r.to_dict() for r in ab.rows]})]


def _resnet_inversion(repro, name: str):
    """The study's ResNet-32 inversion: the subject policy's first between ratios 0.09 and 0.12."""
    curve = repro.curves.get((name, SUBJECT_POLICY))
    return next((i for i in (curve.inversions if curve else []) if 0.09 <= i.last_feasible.ratio <= 0.12), None)


def _two_pathologies(repro) -> list[Claim]:
    """(d) on the study's two cases (report.mechanisms' measures): supported when the LSTM pairs are
    churn and the ResNet-32 inversion a frontier, two different kinds; every other instability is a
    finding beside it."""
    from ..analysis.mechanism import CHURN, FRONTIER, INVERSION, SWITCH

    statement = ("The LSTM switch and the ResNet-32 inversion are at least two distinct budget-sensitive "
                 "pathologies (eviction churn, an exhausted pinned frontier) rather than one mechanism")
    infos = [_study_trace(repro, n) for n in ("lstm", "resnet32")]
    why = next((w for _, w in infos if w), None)
    sp, inv = repro.study_pair, (_resnet_inversion(repro, infos[1][0]["name"]) if infos[1][0] else None)
    if why or sp is None or inv is None:
        return [Claim("d", "lstm, resnet32", statement, "the study's two cases are not both measured here",
                      why or DIFFERS, HYPOTHESIS, {})]
    sigs = repro.mechanisms

    def sig_of(kind, trace, ref, bad):
        return next((s for s in sigs if s.kind == kind and s.trace == trace and s.reference.budget_bytes ==
                     ref.budget_bytes and s.unstable.budget_bytes == bad.budget_bytes), None)

    lstm = [sig_of(SWITCH, sp.trace, s.fast, s.slow) for s in sp.switches]
    resnet = sig_of(INVERSION, infos[1][0]["name"], inv.last_feasible, inv.infeasible[0])
    cases = [s for s in lstm + [resnet] if s is not None]
    if len(cases) != len(lstm) + 1:
        return [Claim("d", "lstm, resnet32", statement, "a case of the study was not measured", DIFFERS, HYPOTHESIS, {})]
    distinct = all(s.mechanism == CHURN for s in lstm) and resnet.mechanism == FRONTIER
    case_words = "; ".join(f"{s.trace} {s.kind} {s.label}: {s.mechanism} (churn rate {s.churn_rate:.2f}, "
                           f"Jaccard {s.jaccard:.3f}, pool {'empty' if s.unstable.pool_empty else 'never empty'}"
                           + (f", {s.unstable.depth} frames deep" if s.unstable.depth is not None else "") + ")"
                           for s in cases)
    kinds = "two different kinds" if distinct else "not churn and frontier"
    measured = (f"the study's cases: {case_words}: {kinds}. The census of every other switch and inversion "
                "is listed beside the claims")
    # The claim is about the study's two cases; the other instabilities of these traces are a
    # finding beside it (_census), not part of its verdict.
    verdict = SUPPORTED if distinct else DIFFERS
    return [Claim("d", "lstm, resnet32", statement, measured, verdict, HYPOTHESIS,
                  {"cases": [s.to_dict() for s in cases]})]


@dataclass(frozen=True)
class Beside:
    """A finding of the runs beside a claim (what the study does not mention): listed next to the
    claims, never part of a verdict. `key` names the claim it stands beside."""

    key: str
    trace: str
    text: str
    evidence: dict

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _larger_switches(repro) -> list[Beside]:
    """The switches of the study's LSTM window larger than the pairs' (the rule does not choose by size)."""
    sp = repro.study_pair
    info, why = _study_trace(repro, "lstm")
    if why or sp is None or not sp.larger:
        return []
    words = ", ".join(f"{sp.label(s)} ({s.factor:.2f}x)" for s in sp.larger)
    text = (f"the fine window {sp.window_label} holds {len(sp.larger)} switch{'es' if len(sp.larger) > 1 else ''} "
            f"larger than the study's pair {sp.label(sp.largest)} ({sp.largest.factor:.2f}x), which the study does "
            f"not mention: {words} (fast/slow)")
    return [Beside("a1", sp.trace, text, {"larger": [s.to_dict() for s in sp.larger]})]


def _census(repro) -> list[Beside]:
    """Every switch and inversion of the subject policy on the study's two traces, by mechanism."""
    from .mechanisms import mechanism_counts

    infos = [_study_trace(repro, n) for n in ("lstm", "resnet32")]
    if any(why for _, why in infos) or not repro.mechanisms:
        return []
    counts = mechanism_counts(repro)
    study = {info["name"]: counts[info["name"]] for info, _ in infos}
    words = "; ".join(f"{t}: " + ", ".join(f"{row[k]} {k}" for k in row) for t, row in study.items())
    return [Beside("d", "lstm, resnet32", f"every switch and inversion of {SUBJECT_POLICY} on the study's traces "
                   f"by mechanism: {words}", {"counts": study})]


def beside_claims(repro) -> list[Beside]:
    """The findings beside the claims, in the claims' order."""
    return _larger_switches(repro) + _census(repro)


def study_missing(claims) -> bool:
    """True when some claim's trace is not here: the report then says how to get the study's traces."""
    return any(c.verdict.startswith(NOT_APPLICABLE) for c in claims)


def evaluate(repro) -> list[Claim]:
    """Every claim of the study, measured on this reproduction's runs."""
    return _lstm(repro) + _resnet(repro) + _ablation_claim(repro) + _two_pathologies(repro)
