"""Writing the report folder: figures/*.png|svg, report.html (self-contained), summary.md, run.json.

Owns which figures a Reproduction gets and the files they go to (the tables are report.tables'). The report and
the figures are the same bytes for the same runs; what changes from call to call (the time, how
long each stage took, how many runs were new) goes to run.json only.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import pickle
from pathlib import Path

from .. import __version__
from . import leaderboard, plots, pool
from .html import render_html, render_markdown
from .memo import code_digest
from .plan import FINE_STEP, SUBJECT_POLICY, fine_neighbours


def _canonical_bytes(value) -> bytes:
    """The same bytes for equal values, however they were made: through a pickle first (an array
    read back from the memo has another layout than the one it was made from), then pickled
    without the pickler's memo (which writes a value shared by two places once, so the bytes
    would depend on which objects happen to be one object)."""
    value = pickle.loads(pickle.dumps(value, protocol=5))
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=5)
    pickler.fast = True  # no memo; the inputs hold no cycles
    pickler.dump(value)
    return buf.getvalue()


class _Drawn:
    """The figures a folder already holds, each by the digest of what drew it (figures/digests.json):
    a figure whose inputs and code are unchanged is not drawn again (its files are the same bytes)."""

    FILE = "digests.json"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        try:
            self.digests = json.loads((folder / self.FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.digests = {}
        if not isinstance(self.digests, dict):
            self.digests = {}

    def draw(self, jobs: list[tuple], workers: int | None, tick) -> None:
        """Draw each (name, draw, args) of `jobs` whose digest or files the folder lacks, on `workers`
        processes (report.pool); tick(name) after each job, drawn or not."""
        from importlib import metadata

        version = metadata.version("matplotlib")
        todo, digests = [], {}
        for name, draw, args in jobs:
            data = _canonical_bytes((name, args, version, code_digest()))
            digests[name] = hashlib.sha256(data).hexdigest()
            if self.digests.get(name) == digests[name] and all(f.is_file() for f in plots.files(self.folder, name)):
                tick(name)
            else:
                self.digests.pop(name, None)  # a figure half written is never taken as drawn
                todo.append((len(data), pool.Task(_draw, (str(self.folder), name, draw, args), name)))
        if todo:
            self.save()
            # the most data first: the longest to draw, as a rule
            pool.run_tasks([t for _, t in sorted(todo, key=lambda x: -x[0])], {}, workers, tick)
        self.digests.update(digests)
        self.save()

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f"{self.FILE}.partial"
        partial.write_text(json.dumps(self.digests, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(partial, self.folder / self.FILE)


def _draw(folder: str, name: str, draw, args: tuple) -> None:
    plots.save(draw(*args), Path(folder), name)


def _figures(repro, tick=lambda _what: None, workers: int | None = 1) -> dict[str, dict]:
    """name -> {png, svg, caption}; drawn from the reproduction, nothing simulated here, on `workers`
    processes (default: this one); tick(name) after each."""
    drawn = _Drawn(repro.out_dir / "figures")
    out: dict[str, dict] = {}
    jobs: list[tuple] = []

    def keep(name, caption, draw, *args):
        png, svg = plots.files(drawn.folder, name)
        out[name] = {"png": png, "svg": svg, "caption": caption}
        jobs.append((name, draw, args))

    paper = set(repro.plan.policies)
    for info in repro.traces:
        trace = info["name"]
        per = {p: c for (t, p), c in repro.curves.items() if t == trace and p in paper}
        if per:
            keep(f"overhead-{trace}",
                 f"{trace}: overhead against budget for every policy (coarse grid, plus fine scans for "
                 f"{SUBJECT_POLICY}); shaded: {SUBJECT_POLICY}'s fast and slow regimes; x: infeasible budgets.",
                 plots.overhead_curves, trace, per, SUBJECT_POLICY, repro.plan.overhead_limit)
    strips = []
    for (t, p), curve in sorted(repro.curves.items()):
        ratios = sorted(r.ratio for r in curve.runs if r.ratio is not None)
        fine = [(a, b) for a, b in zip(ratios, ratios[1:]) if fine_neighbours(a, b)]
        if p == SUBJECT_POLICY and fine:
            lo, hi = min(a for a, _ in fine), max(b for _, b in fine)
            strips.append((t, [r for r in curve.runs if r.ratio is not None and lo <= r.ratio <= hi]))
    if strips:
        keep("feasibility-fine",
             f"Outcome of every budget of the fine scans ({FINE_STEP} steps) of each trace; white: a budget not "
             "run, between two that agree (the grid is refined wherever neighbours differ).",
             plots.feasibility_strip, strips, SUBJECT_POLICY, float(FINE_STEP))
    f = repro.focus
    if f is not None:
        keep("evictions-per-storage",
             f"{f.trace}: how often each evicted storage is evicted in the fast and the slow run of the largest switch.",
             plots.eviction_histograms, f.trace, f.policy, (f.switch.fast.ratio, f.per_storage_fast),
             (f.switch.slow.ratio, f.per_storage_slow))
    _timeline_figures(repro, keep)
    cases = [c for c in repro.ooms if c.series is not None]
    if cases:
        # What the data shows, not a trace's name: the subject policy's deepest frontier (the most
        # frames of rematerialization when memory ran out), then the smallest budget.
        c = min(cases, key=lambda c: (c.policy != SUBJECT_POLICY, -len(c.report.frames), c.trace, c.ratio or 0))
        r = c.report
        keep("memory-near-oom",
             f"{c.trace} / {c.policy}: resident memory over the last changes before the OOM, against the budget "
             "and the bytes that were pinned (and pinned or locked) when it ran out.",
             plots.memory_near_oom, c.trace, c.policy, c.ratio, c.series, r.budget_bytes, r.pinned_bytes,
             r.frontier_bytes)
    if repro.ablation is not None:
        a = repro.ablation
        keep("ablation-heatmap", f"{a.trace}: every ablation of the DTR score over the budgets around the focus.",
             plots.ablation_heatmap, a.trace, a.ratios, a.curves)
    for tb in (repro.baselines.traces if repro.baselines is not None else ()):
        keep(f"optimal-{tb.trace}",
             f"{tb.trace}: overhead against budget of DTR, DTR's envelope (the least overhead DTR reaches at any "
             "budget up to each), the best schedule the solver found (replayed by the schedule checker) and the lower "
             "bound no schedule beats, at the budgets the store has solver rows for; x: DTR runs out of memory.",
             plots.optimal_baselines, tb.trace, tb.points)
    if repro.leaderboard is not None:
        keep("leaderboard", "Every ranked policy's overhead against budget on each trace (feasible budgets; log scale).",
             leaderboard.figure, repro.leaderboard)
    c = repro.checkpointing
    if c is not None and c.runs:
        keep("checkpointing",
             "Each zoo model's training step in every mode: its measured peak against its median step time, one curve "
             "a mode, each point labelled with its setting (staged: the ratio of its own unconstrained peak; compile: "
             "the activation memory budget); hollow: peaks by the allocator's count (compiled steps, and plain's "
             "beside them), the others by live storages.",
             plots.checkpointing_curves, c.figure_data)
    drawn.draw(jobs, workers, tick)
    return out


def _timeline_figures(repro, keep) -> None:
    """The switch over the simulated clock and the zoomed LSTM comb (report.timelines draws them)."""
    from . import timelines as tls

    t, f = repro.timelines, repro.focus
    if t is not None and t.fast is not None:
        keep("switch-timeline",
             f"{t.switch_trace}: the fast ({t.fast.label}) and the slow ({t.slow.label}) run of the switch over the "
             "simulated clock: resident memory against each budget, cumulative recompute time, and every eviction "
             "by storage; dotted: the first eviction where the two runs choose differently.",
             tls.switch_figure, t, f.divergence if f is not None else None)
    pair = repro.study_pair
    if pair is not None and tls.zoom_runs(repro.curves[(pair.trace, SUBJECT_POLICY)])[0]:
        lo, hi = tls.ZOOM_RATIOS
        keep("lstm-zoom",
             f"{pair.trace}: the budgets between {lo:g} and {hi:g} that the full curve smears, one marker per "
             f"budget, coloured by regime; circled and labelled: the study's pair ({pair.labels}).",
             tls.zoom_figure, pair.trace, repro.curves[(pair.trace, SUBJECT_POLICY)], pair)


RUN_RECORD = "run.json"


def new_runs_line(repro) -> str:
    """What this call simulated; a rerun into the same folder says it simulated nothing."""
    solves = f"; {repro.new_solves:,} new solves" if repro.new_solves else ""
    if repro.new_runs == 0:
        return f"0 new runs: every one of the {len(repro.frame):,} runs was in the store{solves}"
    return f"{repro.new_runs:,} new runs, {len(repro.frame) - repro.new_runs:,} from the store{solves}"


def write_all(repro, tick=lambda _what: None, workers: int | None = 1) -> dict:
    """The figures (on `workers` processes; tick(name) after each), report.html and summary.md."""
    figures = _figures(repro, tick, workers)
    (repro.out_dir / "report.html").write_text(render_html(repro, figures), encoding="utf-8")
    (repro.out_dir / "summary.md").write_text(render_markdown(repro, figures), encoding="utf-8")
    return figures


def write_run_record(repro) -> Path:
    """run.json: this call's metadata (when, how long, what was new), kept out of the report."""
    record = {"dtrlab_version": __version__, "source": repro.source, "plan": repro.plan.name,
              "finished_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "wall_s": round(repro.wall_s, 3), "timings_s": {k: round(v, 3) for k, v in repro.timings.items()},
              "runs": len(repro.frame), "new_runs": repro.new_runs, "new_solves": repro.new_solves, "summary": new_runs_line(repro)}
    path = repro.out_dir / RUN_RECORD
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path
