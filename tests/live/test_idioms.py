"""The conformance suite of training-step idioms: each idiom (idioms.py) through capture, simulate
and the live runtime (planned on both engines, and unplanned) at ratios 1.0, 0.7 and 0.4, bitwise
against plain PyTorch from the same state, decisions against the simulation on the logical clock;
and docs/idioms.md's table is what runs (idioms_table.py makes and reads it), staged cells included."""

from __future__ import annotations

import gc
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

import idioms_table as tbl  # noqa: E402
from conftest import require_compiled  # noqa: E402
from idioms import IDIOMS, Idiom, Rig  # noqa: E402
from live_helpers import deterministic_torch  # noqa: E402,F401 (an autouse fixture)

DOC = Path(__file__).resolve().parents[2] / "docs" / "idioms.md"
FAST_RATIO = 0.7  # the fast tier's; the others are slow

# What does not conform today, by (idiom, ratio): the failure's first line, in short. The case is a
# strict xfail, so the suite fails the day it is fixed (and the doc's table must then be remade).
FAILING: dict[tuple[str, float], str] = {}


@pytest.fixture(scope="module", autouse=True)
def cheap_collections():
    """`record` and `live_step` collect garbage before each step, and a collection walks every
    object alive, 0.1 to 0.4 s of it here. The objects alive before each test (torch's lazily
    imported modules among them) are frozen out of the collector's walk instead; the module thaws
    them when it ends."""
    yield
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _frozen_heap(cheap_collections):
    gc.freeze()


def _cases() -> list:
    out = []
    for idiom in IDIOMS:
        for ratio in tbl.RATIOS:
            marks = [] if ratio == FAST_RATIO else [pytest.mark.slow]
            why = FAILING.get((idiom.name, ratio))
            if why is not None:
                marks.append(pytest.mark.xfail(strict=True, reason=why))
            out.append(pytest.param(idiom.name, ratio, marks=marks, id=f"{idiom.name}@{ratio:g}"))
    return out


def _doc_cases() -> list:
    return [pytest.param(idiom.name, ratio, marks=[] if ratio == FAST_RATIO else [pytest.mark.slow],
                         id=f"{idiom.name}@{ratio:g}") for idiom in IDIOMS for ratio in tbl.RATIOS]


def _row(name: str, ratio: float) -> tbl.Row:
    require_compiled()  # the planned column is both engines'
    return tbl.row(name, ratio)


@pytest.mark.parametrize("name, ratio", _cases())
def test_the_idiom_conforms(name, ratio):
    """Captured and lowered, bitwise plain; simulated; live, planned on both engines with the
    simulation's decisions and unplanned, each bitwise plain when it finishes; staged, bitwise plain
    or refused in one line. Running out of memory is a result (at 1.0 it is not: the ratio is of what
    the step needs); anything else fails."""
    row = _row(name, ratio)
    allowed = {tbl.OK} if ratio == 1.0 else {tbl.OK, tbl.OOM}
    bad = {column: s.why or s.kind for column, s in zip(tbl.COLUMNS, (row.capture, row.simulate, row.planned,
                                                                      row.unplanned)) if s.kind not in allowed}
    staged = tbl.staged(name, ratio)  # staging refuses what it cannot run right; it never runs it wrong
    if staged.kind not in allowed | {tbl.REFUSED}:
        bad["staged"] = staged.why or staged.kind
    assert not bad, bad
    if ratio == 1.0:
        assert row.simulate.evictions == 0


@pytest.mark.parametrize("name, ratio", _doc_cases())
def test_the_doc_s_table_is_what_runs(name, ratio):
    """docs/idioms.md's cells for the idiom at this ratio (and its capture's) are what it computed,
    the staged one included; a failure's (or a refusal's) note is its first line."""
    rows, notes = tbl.read_doc(DOC.read_text())
    assert name in rows, f"{name} has no row in {DOC.name}: remake it (idioms_table.py)"
    written, row, k = rows[name], _row(name, ratio), tbl.RATIOS.index(ratio)
    problems = [tbl.check_doc_cell(written.capture, row.capture, name, notes),
                tbl.check_doc_cell(written.simulate[k], row.simulate, name, notes),
                tbl.check_doc_cell(written.planned[k], row.planned, name, notes),
                tbl.check_doc_cell(written.unplanned[k], row.unplanned, name, notes),
                tbl.check_doc_cell(written.staged[k], tbl.staged(name, ratio), name, notes)]
    problems = [p for p in problems if p]
    assert not problems, f"{DOC.name} disagrees (remake it: idioms_table.py): {problems}"


def test_the_doc_s_table_has_every_idiom_once_and_its_notes():
    """The rows are the suite's idioms in its order, each ratio has its cell, every note is used."""
    text = DOC.read_text()
    rows, notes = tbl.read_doc(text)
    assert list(rows) == [i.name for i in IDIOMS]
    assert all(len(c) == len(tbl.RATIOS) for r in rows.values()
               for c in (r.simulate, r.planned, r.unplanned, r.staged))
    cited = {int(n) for r in rows.values() for c in (r.capture, *r.simulate, *r.planned, *r.unplanned, *r.staged)
             for n in re.findall(r"(?:fails|refused) \[(\d+)\]", c)}
    assert cited == set(notes), (cited, set(notes))


class _Drifting:
    """A step that is not the same step twice: its n-th call scales its input by n and takes another
    path every fourth call (exp, not sigmoid), so the oracle (the 2nd call), the capture (the 4th)
    and the planned live run on the compiled engine (the 6th) are different steps."""

    def __init__(self) -> None:
        self.calls = 0

    def make(self) -> Rig:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 4)
        x = torch.randn(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)

        def step():
            self.calls += 1
            opt.zero_grad()
            h = model(x * self.calls)
            (h.exp() if self.calls % 4 == 0 else h.sigmoid()).sum().backward()
            opt.step()

        return Rig(step, {"model": model}, [opt])


def test_the_suite_finds_a_step_that_is_not_the_same_each_time(monkeypatch):
    """The checks can fail: a step whose path and values depend on how often it ran differs from
    its plan (planned) and from the oracle (unplanned), and the statuses say so, each with a line."""
    require_compiled()
    drifting = Idiom("drifting", "a step that differs each call", _Drifting().make)
    monkeypatch.setitem(tbl.BY_NAME, "drifting", drifting)
    row = tbl.row.__wrapped__("drifting", 1.0)
    assert row.capture.kind == tbl.FAILS and "differs from plain PyTorch" in row.capture.why
    assert row.planned.kind == tbl.FAILS and "PlanMismatch" in row.planned.why
    assert row.unplanned.kind == tbl.FAILS and "differs from plain PyTorch" in row.unplanned.why
    assert "\n" not in row.planned.why
