"""The study's claims, each checked against dtrlab's own runs: the figure measured and a verdict.

Owns Claim and evaluate(); the study's numbers live here as what is claimed, never as results.
"""

from __future__ import annotations

from dataclasses import dataclass

from .findings import inversion_text
from .plan import SUBJECT_POLICY
from .study import STUDY_TRACES

REPRODUCED, DIFFERS, NOT_APPLICABLE = "reproduced", "differs", "not applicable to these traces"
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
    """(the trace's info, None) when the study's trace is here; else (None, why not)."""
    info = next((t for t in repro.traces if t["name"] == name), None)
    if info is None:
        return None, f"{NOT_APPLICABLE}: no {name} trace in this run"
    if info["sha256"] != STUDY_TRACES[name]:
        return None, (f"{NOT_APPLICABLE}: this {name} is another trace than the study's "
                      f"(public DTR {name}, sha256 {STUDY_TRACES[name][:12]})")
    return info, None


def _closest(pairs, distance):
    return min(pairs, key=distance) if pairs else None


def _pair_text(pc) -> str:
    sw = pc.switch
    return (f"ratios {sw.fast.ratio:g} (overhead {sw.fast.overhead:.3f}) and {sw.slow.ratio:g} "
            f"(overhead {sw.slow.overhead:.3f}): {sw.factor:.2f}x; evictions per evicted storage "
            f"{pc.per_storage_fast:.2f} -> {pc.per_storage_slow:.2f}; evicted storages "
            f"{pc.distinct_fast:,} vs {pc.distinct_slow:,}, Jaccard {pc.jaccard:.3f}")


def _lstm(repro) -> list[Claim]:
    """The study quotes figures of particular neighbouring budgets without naming them: look for
    a fine switch of the LSTM that carries each figure (at the precision it is stated)."""
    statement_a1 = ("LSTM: budgets 0.10% of peak apart select fast and slow regimes whose overheads "
                    "differ by up to 7.3x")
    statement_a2 = ("LSTM: in the slow regime evictions per evicted storage rise from 1.33 to 8.27 "
                    "(all evictions, policy + eager)")
    statement_a3 = ("LSTM: the set of evicted storages barely changes (5,233 vs 5,236, Jaccard 0.999)")
    info, why = _study_trace(repro, "lstm")
    pairs = [pc for pc in repro.pairs if pc.trace == "lstm"]
    largest = max(pairs, key=lambda pc: pc.switch.factor, default=None)
    beyond = (f"; the largest between neighbouring fine budgets scanned: {largest.switch.factor:.2f}x at "
              f"{largest.switch.fast.ratio:g}/{largest.switch.slow.ratio:g}") if largest else ""
    p1 = _closest(pairs, lambda pc: abs(pc.switch.factor - 7.3))
    p2 = _closest(pairs, lambda pc: abs(pc.per_storage_fast - 1.33) + abs(pc.per_storage_slow - 8.27))
    p3 = _closest(pairs, lambda pc: abs(pc.distinct_fast - 5233) + abs(pc.distinct_slow - 5236)
                  + 1000 * abs(pc.jaccard - 0.999))
    none = "no switch between neighbouring fine budgets measured"
    measured = [(_pair_text(p) + (beyond if i == 0 else "")) if p else none for i, p in enumerate((p1, p2, p3))]
    ok1 = p1 is not None and _same(p1.switch.factor, "7.3")
    ok2 = p2 is not None and _same(p2.per_storage_fast, "1.33") and _same(p2.per_storage_slow, "8.27")
    ok3 = (p3 is not None and (p3.distinct_fast, p3.distinct_slow) == (5233, 5236) and _same(p3.jaccard, "0.999"))
    verdicts = [why or (REPRODUCED if ok else DIFFERS) for ok in (ok1, ok2, ok3)]
    evidence = [p.to_dict() if p else {} for p in (p1, p2, p3)]
    return [Claim(key, "lstm", st, m, v, DEMONSTRATED, e) for key, st, m, v, e in
            zip(("a1", "a2", "a3"), (statement_a1, statement_a2, statement_a3), measured, verdicts, evidence)]


def _resnet(repro) -> list[Claim]:
    statement_b1 = "ResNet-32: feasible at ratio 0.101, out of memory across 0.102-0.106, feasible again from 0.107"
    statement_b2 = ("ResNet-32: the OOM comes from a fully pinned recursive rematerialization frontier that "
                    "exceeds the budget after every evictable tensor is gone")
    info, why = _study_trace(repro, "resnet32")
    curve = repro.curves.get(("resnet32", SUBJECT_POLICY))
    invs = curve.inversions if curve is not None else []
    near = [i for i in invs if 0.09 <= i.last_feasible.ratio <= 0.12]
    if near:
        inv = near[0]
        oom_ratios = [r.ratio for r in inv.infeasible]
        measured_b1 = inversion_text(inv)
        ok_b1 = (inv.last_feasible.ratio == 0.101 and inv.next_feasible.ratio == 0.107
                 and oom_ratios == [0.102, 0.103, 0.104, 0.105, 0.106]
                 and all(r.outcome == "oom" for r in inv.infeasible))
        evidence_b1 = inv.to_dict()
    else:
        measured_b1, ok_b1, evidence_b1, inv = "no inversion between 0.09 and 0.12", False, {}, None
    cases = [c for c in repro.ooms if c.trace == "resnet32" and c.policy == SUBJECT_POLICY and inv is not None
             and c.ratio in {r.ratio for r in inv.infeasible}]
    if cases:
        held = [c for c in cases if c.report.frontier_exceeds_budget]
        deepest = max(cases, key=lambda c: len(c.report.frames))
        r = deepest.report
        measured_b2 = (f"{len(held)} of {len(cases)} OOM budgets: evictable pool empty and pinned + locked + "
                       f"next compute exceed the budget; at {deepest.ratio:g}: {len(r.frames)} frames deep "
                       f"({sum(f.remat for f in r.frames)} rematerializations), locked {r.locked_bytes / 2**20:,.1f} MiB "
                       f"+ pinned {r.pinned_bytes / 2**20:,.1f} MiB + need {r.need_bytes / 2**20:,.1f} MiB > "
                       f"budget {r.budget_bytes / 2**20:,.1f} MiB")
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
    ab = repro.ablation
    if ab is None or ab.trace != "lstm":
        return [Claim("c", "lstm", statement, "no ablation around an LSTM switch", why or DIFFERS, HYPOTHESIS, {})]
    both = [r for r in ab.rows if r.policy.endswith("-size-stale")]
    others = [r for r in ab.rows if not r.policy.endswith("-size-stale")]
    unstable = lambda r: r.switches > 0 or r.inversions > 0  # noqa: E731
    n_both, n_other = sum(map(unstable, both)), sum(map(unstable, others))
    measured = (f"window {ab.ratios[0]:g}-{ab.ratios[-1]:g}: switches or inversions in {n_both} of {len(both)} "
                f"variants with size x staleness ({', '.join(r.policy for r in both if unstable(r)) or 'none'}), "
                f"in {n_other} of {len(others)} without it "
                f"({', '.join(r.policy for r in others if unstable(r)) or 'none'})")
    # Implicated: the instability needs both terms (present with them, absent without).
    verdict = why or (REPRODUCED if n_both > 0 and n_other == 0 else DIFFERS)
    return [Claim("c", "lstm", statement, measured, verdict, HYPOTHESIS,
                  {"rows": [r.to_dict() for r in ab.rows]})]


def study_missing(claims) -> bool:
    """True when some claim's trace is not here: the report then says how to get the study's traces."""
    return any(c.verdict.startswith(NOT_APPLICABLE) for c in claims)


def evaluate(repro) -> list[Claim]:
    """Every claim of the study, measured on this reproduction's runs."""
    return _lstm(repro) + _resnet(repro) + _ablation_claim(repro)
