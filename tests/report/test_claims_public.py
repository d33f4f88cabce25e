"""The study's headline on the public traces, for real: a focused plan (report.plan.CLAIMS) runs the
claims on ../shared/traces/dtr-iclr21 with the LSTM, and each verdict and figure is the study's text
(tests/goldens.json), not whatever dtrlab happens to compute."""

from __future__ import annotations

import pytest

from dtrlab.report.claims import REPRODUCED
from dtrlab.report.findings import StudyPair
from dtrlab.report.pipeline import reproduce
from dtrlab.report.plan import CLAIMS

from conftest import TRACES, golden, needs_compiled, needs_shared, require_shared

pytestmark = [needs_shared, needs_compiled, pytest.mark.slow]  # all behind one study run


@pytest.fixture(scope="module")
def claims_run(tmp_path_factory):
    require_shared()
    return reproduce(str(TRACES), tmp_path_factory.mktemp("claims") / "report", plan=CLAIMS, workers=2,
                     progress=False)


def _digits(value: float, stated: str) -> str:
    return f"{value:.{len(stated.split('.')[1])}f}"


def test_the_claims_plan_reads_only_the_study_traces(claims_run):
    assert sorted(t["name"] for t in claims_run.traces) == ["lstm", "resnet32"]
    assert set(claims_run.frame["policy"]) - {"dtr"} <= {p for p in claims_run.frame["policy"] if p.startswith("ab-")}


def test_a1_a3_are_reproduced_on_the_named_pairs(claims_run):
    want = golden("study_lstm_pair")
    pair = claims_run.study_pair
    assert pair is not None and pair.trace == "lstm"
    # One fast run and its slow neighbours, chosen once.
    assert {s.fast.ratio for s in pair.switches} == {want["fast_ratio"]}
    assert [s.slow.ratio for s in pair.switches] == want["slow_ratios"]
    claims = {c.key: c for c in claims_run.claims}
    for key in ("a1", "a2", "a3"):
        assert claims[key].verdict == REPRODUCED, (key, claims[key].measured)
    assert claims["a1"].evidence["pair"] == want["a1_pair"]
    assert claims["a2"].evidence["pair"] == claims["a3"].evidence["pair"] == want["a2_a3_pair"]
    churn = {StudyPair.label(p.switch): p for p in claims_run.pairs if p.trace == "lstm"}
    a1, a23 = churn[want["a1_pair"]], churn[want["a2_a3_pair"]]
    assert _digits(a1.switch.factor, want["factor"]) == want["factor"]
    assert a1.switch.factor == max(s.factor for s in pair.switches)  # "up to"
    assert _digits(a23.per_storage_fast, want["per_storage_fast"]) == want["per_storage_fast"]
    assert _digits(a23.per_storage_slow, want["per_storage_slow"]) == want["per_storage_slow"]
    assert (a23.distinct_fast, a23.distinct_slow) == (want["distinct_fast"], want["distinct_slow"])
    assert _digits(a23.jaccard, want["jaccard"]) == want["jaccard"]
    # The report says which pair gives which figure.
    summary = (claims_run.out_dir / "summary.md").read_text()
    assert f"{want['factor']}0x (overhead" in summary and f"on {want['a1_pair']}" in summary
    assert (f"{want['per_storage_fast']} -> {want['per_storage_slow']} evictions per evicted storage "
            f"on {want['a2_a3_pair']}") in summary
    # The close look and the ablation are of the same pairs.
    assert claims_run.focus is not None and claims_run.focus.switch == pair.largest
    ab = claims_run.ablation
    assert ab is not None and ab.trace == "lstm"
    assert min(ab.ratios) <= min(want["slow_ratios"]) < max(want["slow_ratios"]) <= max(ab.ratios)
    assert f"around the same pairs ({pair.labels})" in claims["c"].measured


def test_b1_b2_are_reproduced(claims_run):
    want = golden("study_resnet32_inversion")
    claims = {c.key: c for c in claims_run.claims}
    b1, b2 = claims["b1"], claims["b2"]
    assert b1.verdict == REPRODUCED and b2.verdict == REPRODUCED, (b1.measured, b2.measured)
    assert b1.evidence["last_feasible_ratio"] == want["last_feasible_ratio"]
    assert b1.evidence["infeasible_ratios"] == want["infeasible_ratios"]
    assert b1.evidence["next_feasible_ratio"] == want["next_feasible_ratio"]
    assert b2.evidence["explained"] == b2.evidence["frontier_exceeds_budget"] == len(want["infeasible_ratios"])


def test_the_report_writes_and_links_the_pairs_and_an_ooms_timelines(claims_run, tmp_path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    from report_checks import CHROMIUM, check_in_chromium, local_links

    want = golden("study_lstm_pair")
    files = {f.path: f for f in claims_run.timelines.files}
    fast, slow = want["fast_ratio"], claims_run.study_pair.largest.slow.ratio
    stems = {f"timelines/lstm-{fast:g}-dtr", f"timelines/lstm-{slow:g}-dtr", "timelines/resnet32-0.102-dtr-oom"}
    assert {p.rsplit(".", 1)[0] for p in files} == stems
    for path, f in files.items():
        on_disk = claims_run.out_dir / path
        assert on_disk.stat().st_size == f.size_bytes
        if f.fmt == "perfetto":
            assert len(Trace.FromString(on_disk.read_bytes()).packet) > 0
    html = (claims_run.out_dir / "report.html").read_text()
    assert sorted(local_links(html)) == sorted(files)
    for f in files.values():  # one sentence on how to open each
        assert f.how in html
    assert {"switch-timeline", "lstm-zoom"} <= set(claims_run.figures)
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")
    check_in_chromium(claims_run, tmp_path)


def test_d_two_pathologies_on_the_study_cases(claims_run):
    from dtrlab.analysis.mechanism import CHURN, FRONTIER
    from dtrlab.report.claims import SUPPORTED

    d = {c.key: c for c in claims_run.claims}["d"]
    want = golden("mechanisms_study_cases")
    cases = {(c["trace"], c["pair"]): c["mechanism"] for c in d.evidence["cases"]}
    assert cases[("lstm", want["lstm"]["pair"])] == CHURN
    assert cases[("resnet32", want["resnet32"]["pair"])] == FRONTIER
    # The claims' windows hold only these kinds: every switch churns, the inversion is a frontier.
    assert all(k == CHURN for (t, _), k in cases.items() if t == "lstm")
    assert d.verdict == SUPPORTED, d.measured
    # The census of every switch and inversion is a finding beside the claim, not its verdict.
    counts = {b.key: b for b in claims_run.beside}["d"].evidence["counts"]
    assert sum(counts["lstm"].values()) == len([s for s in claims_run.mechanisms if s.trace == "lstm"])
    assert "Mechanisms of every switch and inversion" in (claims_run.out_dir / "summary.md").read_text()
