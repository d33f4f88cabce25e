"""The study's pairs are chosen by a rule written down before any claim is looked at (findings.PAIR_RULE),
and on the full plan's LSTM window (0.26-0.34, where the largest switch is not the study's) that rule
finds the runs that show the study's figures (tests/goldens.json): (a1)-(a3) reproduced, with the
larger switches listed beside the claims, not made their verdict."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from dtrlab.report.claims import REPRODUCED, Beside, beside_claims, evaluate
from dtrlab.report.findings import Curve, StudyPair, curves, study_pair
from dtrlab.report.pipeline import _pair_churn, _pair_survey
from dtrlab.report.plan import FULL, REPORT_OVERHEAD_LIMIT, RUNTIME, SUBJECT_POLICY, SWITCH_FACTOR
from dtrlab.report.study import STUDY_TRACES
from dtrlab.sweep.grid import build_specs, parse_ratios
from dtrlab.sweep.run import run_sweep
from dtrlab.sweep.store import Store

from conftest import TRACES, golden, needs_compiled, needs_shared, public_program, require_shared


def _curve(overheads: dict[float, float]) -> dict:
    """A made-up fine curve: ratio -> overhead, every run feasible."""
    runs = tuple(SimpleNamespace(ratio=r, budget_bytes=int(r * 1e6), overhead=o, feasible=True, infeasible=False,
                                 outcome="ok", label=f"{r:g}") for r, o in sorted(overheads.items()))
    return {("t", SUBJECT_POLICY): Curve("t", SUBJECT_POLICY, runs, SWITCH_FACTOR)}


def test_the_rule_takes_the_lowest_fast_run_with_two_slow_neighbours_not_the_largest_switch():
    # 0.101 is fast with one slow neighbour; 0.104 the lowest with slow neighbours on both sides (0.106
    # the next); 0.106/0.107 the largest switch.
    found = _curve({0.1: 3.0, 0.101: 1.0, 0.102: 1.2, 0.103: 4.0, 0.104: 1.0, 0.105: 3.0, 0.106: 1.0, 0.107: 9.0})
    pair = study_pair(found, "t", SUBJECT_POLICY)
    assert pair.fast.ratio == 0.104
    assert [StudyPair.label(s) for s in pair.switches] == ["0.104/0.103", "0.104/0.105"]  # largest factor first
    assert [StudyPair.label(s) for s in pair.larger] == ["0.106/0.107"]
    assert pair.window == (0.1, 0.107)
    # Only inside the window it is given (the plan's study window): there 0.106 is the lowest such run.
    late = study_pair(found, "t", SUBJECT_POLICY, (0.105, 0.107))
    assert late.fast.ratio == 0.106 and late.larger == () and late.window == (0.105, 0.107)
    # Without a run flanked by two slow ones: the lowest fast run of a fine switch, with its slow neighbour(s).
    lone = study_pair(_curve({0.2: 1.0, 0.201: 3.0, 0.202: 1.0, 0.203: 1.1}), "t", SUBJECT_POLICY)
    assert lone.fast.ratio == 0.2 and [StudyPair.label(s) for s in lone.switches] == ["0.2/0.201"]
    assert study_pair(_curve({0.2: 1.0, 0.201: 1.1}), "t", SUBJECT_POLICY) is None


@pytest.fixture(scope="module")
def lstm_window(tmp_path_factory):
    """The dtr runs of the full plan's LSTM window on the public LSTM, in a store of their own."""
    require_shared()
    lstm = public_program("lstm")
    assert lstm.sha256 == STUDY_TRACES["lstm"]
    out = tmp_path_factory.mktemp("lstm-window")
    specs = build_specs(str(TRACES), [lstm], [SUBJECT_POLICY], [RUNTIME], parse_ratios(FULL.windows[lstm.sha256]),
                        overhead_limit=REPORT_OVERHEAD_LIMIT, seed=FULL.seed)
    with Store(out / "runs.duckdb") as store:
        run_sweep(specs, store, workers=2, timeout_s=FULL.timeout_s, progress=False, report=False)
        frame = store.rows(s.key for s in specs)
    return out, lstm, curves(frame, SWITCH_FACTOR)


@pytest.mark.slow
@needs_shared
@needs_compiled
def test_a1_a3_are_reproduced_on_the_full_window_with_the_larger_switches_beside(lstm_window):
    out, lstm, found = lstm_window
    want = golden("study_lstm_pair")
    window = parse_ratios(FULL.windows[lstm.sha256])
    pair = study_pair(found, lstm.name, SUBJECT_POLICY, (min(window), max(window)))
    assert pair.fast.ratio == want["fast_ratio"]
    assert [s.slow.ratio for s in pair.switches] == want["slow_ratios"]
    # The window's largest switch is not the study's: the rule did not choose by size.
    largest = max((s for s in found[(lstm.name, SUBJECT_POLICY)].fine_switches()), key=lambda s: s.factor)
    assert largest.factor > pair.largest.factor and largest in pair.larger
    assert all(s.factor > pair.largest.factor for s in pair.larger)

    plan = replace(FULL, max_pairs=len(pair.switches))  # the churn of the study's pairs alone
    pairs = _pair_churn(out, _pair_survey(found, plan, pair), {lstm.name: lstm}, plan)
    info = {"name": lstm.name, "sha256": lstm.sha256, "operators": lstm.n_ops}
    repro = SimpleNamespace(traces=(info,), left_out=(), plan=plan, study_pair=pair, pairs=pairs, curves=found,
                            ooms=(), ablation=None, mechanisms=())
    claims = {c.key: c for c in evaluate(repro)}
    for key in ("a1", "a2", "a3"):
        assert claims[key].verdict == REPRODUCED, (key, claims[key].measured)
    a1 = claims["a1"]
    assert a1.evidence["pair"] == want["a1_pair"] and a1.evidence["fast_ratio"] == want["fast_ratio"]
    assert a1.evidence["largest_in_window"] is False
    assert f"The fast run: lstm at {want['fast_ratio']:g}" in a1.measured
    assert "not the largest of the fine window 0.26-0.34" in a1.measured
    assert claims["a2"].evidence["pair"] == claims["a3"].evidence["pair"] == want["a2_a3_pair"]
    # The larger switches are a finding of their own, beside (a1).
    (beside,) = [b for b in beside_claims(repro) if b.key == "a1"]
    assert isinstance(beside, Beside)
    assert f"{StudyPair.label(largest)} ({largest.factor:.2f}x)" in beside.text
    assert "which the study does not mention" in beside.text
