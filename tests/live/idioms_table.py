"""Each idiom (idioms.py) through capture, simulate, the live runtime and staging, its status in
each, and docs/idioms.md's table of them.

Owns what each status means, the checks behind it, and the table (made here, checked by
tests/live/test_idioms.py). Regenerate the doc's table after a change in what runs:

    PYTHONPATH=src python tests/live/idioms_table.py docs/idioms.md

Every run of an idiom starts from the same state: the rig made afresh (seeded), one plain warm-up
step (optimizer state exists, as in `dtrlab run`), torch seeded again, then the step compared. The
oracle is that step run plainly. A staged run stages the step from that state (dtrlab.stage, unit
costs), seeds torch again, and runs the staged step once.
"""

from __future__ import annotations

import functools
import gc
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from dtrlab.capture.recorder import record
from dtrlab.live.plan import make_plan
from dtrlab.live.runs import live_step, same_decisions, simulate_plan
from dtrlab.live.session import LiveTensor
from dtrlab.sim.simulate import baseline, budget_from_ratio, compiled_available
from dtrlab.staged.graph import NotStageable
# from the module: once it is imported, dtrlab.staged's attribute `stage` is the module, not the function
from dtrlab.staged.staging import StagingOutOfMemory, stage
from dtrlab.trace.read import Call, Mutate

from idioms import BY_NAME, IDIOMS, Idiom, Rig, state_of

RATIOS = (1.0, 0.7, 0.4)
POLICY = "dtr"
STEP_SEED = 2  # torch's seed before the compared step (random operators draw from it)
OK, OOM, FAILS = "ok", "oom", "fails"
REFUSED = "refused"  # staging only: NotStageable, the step cannot be traced whole (a one-line reason)
NOTED = (FAILS, REFUSED)  # the kinds whose cell points to a note
STAGED_COSTS = "unit"  # dtrlab.stage's costs: measured ones would make its decisions the machine's timing's
OP_COST_NS = 1_000  # every operator's cost in the plan: measured times would make decisions vary by run
NOTE_CHARS = 300  # a failure's first line is cut here in the doc (a plan's mismatch can run to 700)
BEGIN, END = "<!-- idioms table: begin (generated) -->", "<!-- idioms table: end -->"


@dataclass(frozen=True)
class Status:
    """One cell's part: ok (with the policy's evictions, or a staged plan's recomputations, where
    counted), oom (an outcome), refused (staging only), or fails, with the first line of why."""

    kind: str
    evictions: int | None = None
    why: str = ""

    def cell(self, note: int | None = None) -> str:
        if self.kind in NOTED:
            return f"{self.kind} [{note}]"
        return self.kind if self.evictions is None else f"{self.kind} ({self.evictions})"


def first_line(exc: BaseException) -> str:
    """An error's first line, stable from run to run (measured times and addresses left out)."""
    text = (str(exc).splitlines() or [""])[0]
    text = re.sub(r"time_ns=\d+", "time_ns=…", text)
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    return f"{type(exc).__name__}: {text}"


def plain(v):
    """A live tensor's value (its session is over: it is resident or made so); anything else as is."""
    return v._session.value(v) if isinstance(v, LiveTensor) else v


def _same(a, b) -> bool:
    a, b = plain(a), plain(b)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(a.detach().contiguous().reshape(-1).view(torch.uint8),
                           b.detach().contiguous().reshape(-1).view(torch.uint8))
    return type(a) is type(b) and (a == b or (a != a and b != b))


def differences(want: list, got: list) -> list[str]:
    """The names of the state entries that are not bitwise the oracle's."""
    if [n for n, _ in want] != [n for n, _ in got]:
        return [f"the state's entries differ: {[n for n, _ in want]} against {[n for n, _ in got]}"]
    return [n for (n, a), (_, b) in zip(want, got) if not _same(a, b)]


def ready(idiom: Idiom) -> Rig:
    """The idiom's rig after its warm-up step, seeded for the compared step."""
    rig = idiom.make()
    torch.manual_seed(1)
    rig.step()
    torch.manual_seed(STEP_SEED)
    return rig


def fixed_costs(instructions) -> list:
    """The capture with each operator's measured time replaced by OP_COST_NS, so the simulation and
    the live run on the logical clock decide the same way on every run of the suite. A time of 0
    stays 0: it marks the CALL of a MUTATE's new tensors and the recorder's moves (live/plan.py)."""
    return [x._replace(time_ns=OP_COST_NS) if isinstance(x, (Call, Mutate)) and x.time_ns else x
            for x in instructions]


@dataclass(frozen=True)
class Prepared:
    """What every ratio of an idiom shares: the oracle's state, the capture's status, and the plan
    (None when the capture failed)."""

    oracle: list
    capture: Status
    plan: object
    peak_bytes: int


@functools.lru_cache(maxsize=None)
def prepared(name: str) -> Prepared:
    idiom = BY_NAME[name]
    rig = ready(idiom)
    rig.step()
    oracle = state_of(rig)
    try:
        rig = ready(idiom)
        capture = record(rig.step)
        plan = make_plan(fixed_costs(capture.instructions))  # lowered as a trace file is: every check
        peak = baseline(plan.program).peak_bytes
    except Exception as exc:  # noqa: BLE001 (any failure is this idiom's status)
        return Prepared(oracle, Status(FAILS, why=first_line(exc)), None, 0)
    bad = differences(oracle, state_of(rig))
    if bad:
        return Prepared(oracle, Status(FAILS, why=f"the recorded step differs from plain PyTorch in {bad[:4]}"),
                        plan, peak)
    return Prepared(oracle, Status(OK), plan, peak)


def _live(idiom: Idiom, p: Prepared, budget: int, engine: str, planned: bool, sim):
    """One live step from the prepared state: its Status against the oracle (and the simulation)."""
    rig = ready(idiom)
    try:
        run = live_step(rig.step, budget, POLICY, "logical", 0, "cpu", p.plan if planned else None, engine=engine)
    except Exception as exc:  # noqa: BLE001 (anything but an out-of-memory outcome is a failure)
        return Status(FAILS, why=first_line(exc))
    if planned and not (same_decisions(run, sim) and (run.outcome == OOM or run.peak_bytes == sim.peak_bytes)):
        return Status(FAILS, why=f"decisions differ from the simulation's: live {run.outcome}, {run.evictions} "
                                 f"evictions, {run.remats} remats, clock {run.clock_ns}; simulated {sim.outcome}, "
                                 f"{sim.evictions}, {sim.remats}, {sim.clock_ns}")
    if run.peak_bytes > budget:
        return Status(FAILS, why=f"peak {run.peak_bytes} above the budget {budget}")
    if run.outcome == OOM:
        return Status(OOM)
    bad = differences(p.oracle, state_of(rig))
    if bad:
        return Status(FAILS, why=f"differs from plain PyTorch in {bad[:4]}")
    return Status(OK)


def _combined(by_engine: dict[str, Status]) -> Status:
    """One status for several engines: theirs when they agree, else the failures, each named."""
    kinds = {s.kind for s in by_engine.values()}
    if kinds == {OK} or kinds == {OOM}:
        return next(iter(by_engine.values()))
    failed = {e: s for e, s in by_engine.items() if s.kind == FAILS}
    if not failed:
        kinds_by_engine = ", ".join(f"{e} {s.kind}" for e, s in by_engine.items())
        return Status(FAILS, why=f"the engines' outcomes differ: {kinds_by_engine}")
    whys = {s.why for s in failed.values()}
    if len(whys) == 1:
        return Status(FAILS, why=f"{' and '.join(failed)} engine{'s' if len(failed) > 1 else ''}: {whys.pop()}")
    return Status(FAILS, why="; ".join(f"{e} engine: {s.why}" for e, s in failed.items()))


@dataclass(frozen=True)
class Row:
    """An idiom at one ratio: each column's status."""

    capture: Status
    simulate: Status
    planned: Status
    unplanned: Status


ENGINES = ("c", "python")  # planned; unplanned, only the Python engine follows a step as it runs


@functools.lru_cache(maxsize=None)
def row(name: str, ratio: float) -> Row:
    """The idiom's statuses at `ratio` of its plan's peak (the capture's is the same at every ratio)."""
    idiom, p = BY_NAME[name], prepared(name)
    if p.plan is None:
        skipped = Status(FAILS, why="no capture to follow or simulate")
        return Row(p.capture, skipped, skipped, skipped)
    budget = budget_from_ratio(p.plan.program, ratio)
    sim = simulate_plan(p.plan.program, budget, POLICY, 0)
    if ratio == 1.0 and not (sim.outcome == OK and sim.evictions == 0):
        simulated = Status(FAILS, why=f"ratio 1.0 of the plan's peak: {sim.outcome}, {sim.evictions} evictions")
    else:
        simulated = Status(sim.outcome, sim.evictions if sim.outcome == OK else None)
    engines = [e for e in ENGINES if e != "c" or compiled_available()]
    planned = _combined({e: _live(idiom, p, budget, e, True, sim) for e in engines})
    unplanned = _live(idiom, p, budget, "python", False, sim)
    return Row(p.capture, simulated, planned, unplanned)


@functools.lru_cache(maxsize=None)
def staged(name: str, ratio: float) -> Status:
    """The idiom's step staged at `ratio` of the staged graph's own peak from the prepared state,
    run once from the step's seed, against the oracle. ok counts the plan's recomputations;
    StagingOutOfMemory is oom (a result); NotStageable is refused, with its line."""
    idiom, p = BY_NAME[name], prepared(name)
    rig = ready(idiom)
    try:
        step = stage(rig.step, ratio=ratio, costs=STAGED_COSTS, modules=list(rig.modules.values()),
                     optimizers=rig.optimizers)
        torch.manual_seed(STEP_SEED)  # as the oracle's step starts: staging's own draws are not the step's
        step()
    except StagingOutOfMemory:
        return Status(OOM)
    except NotStageable as exc:
        return Status(REFUSED, why=first_line(exc))
    except Exception as exc:  # noqa: BLE001 (anything else is a failure)
        return Status(FAILS, why=first_line(exc))
    bad = differences(p.oracle, state_of(rig))
    if bad:
        return Status(FAILS, why=f"differs from plain PyTorch in {bad[:4]}")
    return Status(OK, step.plan.replay.n_recompute)


# --- the doc's table ----------------------------------------------------------------------------

COLUMNS = ("capture", "simulate", "live, planned", "live, unplanned", "staged")


def table(rows: dict[str, dict[float, Row]], stagings: dict[str, dict[float, Status]]) -> str:
    """The generated block of docs/idioms.md: the table, then the failures' notes."""
    notes: dict[str, int] = {}

    def cell(idiom: str, statuses: list[Status]) -> str:
        parts = []
        for s in statuses:
            n = None
            if s.kind in NOTED:
                text = note_text(idiom, s)
                n = notes.setdefault(text, len(notes) + 1)
            parts.append(s.cell(n))
        return " / ".join(parts)

    ratios = " / ".join(f"{r:g}" for r in RATIOS)
    lines = [BEGIN, "", f"| idiom | {COLUMNS[0]} | {COLUMNS[1]} {ratios} | {COLUMNS[2]} {ratios} | "
                        f"{COLUMNS[3]} {ratios} | {COLUMNS[4]} {ratios} |", "|---|---|---|---|---|---|"]
    for idiom in IDIOMS:
        by_ratio = rows[idiom.name]
        first = by_ratio[RATIOS[0]]
        lines.append(" | ".join([
            f"| {idiom.name}", cell(idiom.name, [first.capture]),
            cell(idiom.name, [by_ratio[r].simulate for r in RATIOS]),
            cell(idiom.name, [by_ratio[r].planned for r in RATIOS]),
            cell(idiom.name, [by_ratio[r].unplanned for r in RATIOS]),
            cell(idiom.name, [stagings[idiom.name][r] for r in RATIOS]) + " |"]))
    lines.append("")
    lines.extend(f"- **[{n}]** {text}" for text, n in notes.items())
    lines += ["", "What each idiom's step does (`tests/live/idioms.py`):", ""]
    lines.extend(f"- *{idiom.name}*: {idiom.what}" for idiom in IDIOMS)
    if notes:
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def note_text(idiom: str, s: Status) -> str:
    why = s.why if len(s.why) <= NOTE_CHARS else s.why[:NOTE_CHARS] + "…"
    return f"{idiom}: {why}"


@dataclass(frozen=True)
class DocRow:
    """A row of the doc's table as written: each column's cell split at its ratios."""

    capture: str
    simulate: tuple[str, ...]
    planned: tuple[str, ...]
    unplanned: tuple[str, ...]
    staged: tuple[str, ...]


def read_doc(text: str) -> tuple[dict[str, DocRow], dict[int, str]]:
    """The doc's table rows by idiom and its notes by number."""
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows, notes = {}, {}
    for line in block.splitlines():
        m = re.match(r"^- \*\*\[(\d+)\]\*\* (.*)$", line)
        if m:
            notes[int(m.group(1))] = m.group(2)
        elif line.startswith("| ") and not line.startswith("| idiom |"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            name, capture, sim, planned, unplanned, staged = cells
            rows[name] = DocRow(capture, tuple(sim.split(" / ")), tuple(planned.split(" / ")),
                                tuple(unplanned.split(" / ")), tuple(staged.split(" / ")))
    return rows, notes


def check_doc_cell(written: str, computed: Status, idiom: str, notes: dict[int, str]) -> str | None:
    """Why a cell's part as written disagrees with the computed status (None when it agrees)."""
    if computed.kind in NOTED:
        m = re.fullmatch(rf"{computed.kind} \[(\d+)\]", written)
        want = note_text(idiom, computed)
        if m is None or notes.get(int(m.group(1))) != want:
            return f"{written!r} in the doc, but it is {computed.kind}: {want}"
        return None
    return None if written == computed.cell() else f"{written!r} in the doc, {computed.cell()!r} computed"


def regenerate(doc: Path) -> str:
    """docs/idioms.md with its generated block remade from the idioms as they run now."""
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    rows, stagings = {}, {}
    for i in IDIOMS:
        gc.freeze()  # each capture and live step collects first: out of the walk, what is alive already
        rows[i.name] = {r: row(i.name, r) for r in RATIOS}
        stagings[i.name] = {r: staged(i.name, r) for r in RATIOS}
    text = doc.read_text()
    head, rest = text.split(BEGIN, 1)
    return head + table(rows, stagings) + rest.split(END, 1)[1]


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/idioms.md")
    path.write_text(regenerate(path))
    print(f"wrote {path}")
