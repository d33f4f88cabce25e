"""The report's timelines: the study's switch pair (else the focus switch) and one OOM written for
Perfetto and PyTorch's memory viewer next to report.html, the switch over the clock, and the
zoomed panel of the study's LSTM comb. Owns which runs get timelines, their files and sentences."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..analysis.scan import Budget
from ..timeline import switchplot
from ..timeline.write import SUFFIXES, Format, write
from ..timeline.source import record
from .memo import memo
from .plan import RUNTIME, SUBJECT_POLICY
from .study import STUDY_TRACES

FOLDER = "timelines"
# The LSTM comb the zoomed panel shows: the study's window of switches.
ZOOM_RATIOS = (0.26, 0.34)
# How to open each format, in one sentence (the report and docs/timelines.md say the same).
HOW_TO_OPEN = {
    Format.perfetto: "open ui.perfetto.dev and drag the .pftrace file onto it (it is read in the browser, "
                     "nothing is uploaded).",
    Format.memviz: "open pytorch.org/memory_viz and drag the .pickle file onto it (it is read in the browser, "
                   "nothing is uploaded); the addresses are modelled by first-fit placement, not measured.",
}
FORMATS = (Format.perfetto, Format.memviz)


@dataclass(frozen=True)
class TimelineFile:
    """One run's timeline in one format, relative to the report folder."""

    what: str  # e.g. "lstm at 0.265 (fast run of the study's pair)"
    fmt: str
    path: str
    size_bytes: int
    how: str


@dataclass(frozen=True, eq=False)
class Timelines:
    """What the report links and draws: the files, and the switch's two series (fast, slow)."""

    files: tuple[TimelineFile, ...]
    switch_trace: str | None = None
    fast: switchplot.SwitchSeries | None = None
    slow: switchplot.SwitchSeries | None = None


def _write_run(out: Path, program, budget: Budget, what: str, stem: str, engine: str,
               label: str | None = None) -> tuple[list[TimelineFile], object]:
    """The run's timeline files (and, given a label, its switchplot series). A rerun of the report
    reads them from the memo while its files are there as written: recording and writing a timeline
    is seconds a run, and the bytes would be the same."""
    def fresh():
        tl = record(program, budget.budget_bytes, SUBJECT_POLICY, RUNTIME, ratio=budget.ratio, engine=engine)
        folder = out / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        files = []
        for fmt in FORMATS:
            path = folder / f"{stem}{SUFFIXES[fmt]}"
            write(tl, fmt, path)
            files.append(TimelineFile(what, fmt.value, f"{FOLDER}/{path.name}", path.stat().st_size,
                                      HOW_TO_OPEN[fmt]))
        return files, None if label is None else switchplot.series(tl, label)

    key = {"trace": program.sha256, "budget": budget.budget_bytes, "ratio": budget.ratio, "policy": SUBJECT_POLICY,
           "runtime": RUNTIME, "what": what, "stem": stem, "label": label}
    files, series = memo(out, "timeline", key, fresh)
    if not all((out / f.path).is_file() and (out / f.path).stat().st_size == f.size_bytes for f in files):
        files, series = fresh()  # a file gone or changed since: write them again
    return files, series


def write_timelines(out: Path, by_name: dict, focus, ooms: tuple, engine: str = "auto",
                    tick=lambda _what: None) -> Timelines:
    """The timelines of the focus switch's two runs (the study's pair when it is there) and of one
    OOM (the study's ResNet-32 first, at its smallest explained budget), written under out/timelines;
    tick(what) after each run."""
    files: list[TimelineFile] = []
    fast = slow = None
    trace = None
    if focus is not None:
        program, sw = by_name[focus.trace], focus.switch
        trace = focus.trace
        for run, side in ((sw.fast, "fast"), (sw.slow, "slow")):
            got, s = _write_run(out, program, Budget(run.ratio, run.budget_bytes),
                                f"{focus.trace} at {run.label} ({side} run of the switch)",
                                f"{focus.trace}-{run.label}-{SUBJECT_POLICY}", engine, f"ratio {run.label}")
            tick(f"{focus.trace} at {run.label}")
            files += got
            fast, slow = (s, slow) if side == "fast" else (fast, s)
    cases = [c for c in ooms if c.policy == SUBJECT_POLICY]
    if cases:
        study = STUDY_TRACES["resnet32"]
        c = min(cases, key=lambda c: (by_name[c.trace].sha256 != study, c.trace, c.ratio or 0))
        program = by_name[c.trace]
        budget = Budget(c.ratio, c.report.budget_bytes)
        got, _ = _write_run(out, program, budget, f"{c.trace} at {budget.label} (out of memory)",
                            f"{c.trace}-{budget.label}-{SUBJECT_POLICY}-oom", engine)
        tick(f"{c.trace} at {budget.label}")
        files += got
    return Timelines(tuple(files), trace, fast, slow)


def switch_figure(timelines: Timelines, divergence):
    t = timelines
    title = (f"{t.switch_trace} / {SUBJECT_POLICY} / {RUNTIME}: {t.fast.label} (fast) against "
             f"{t.slow.label} (slow) over the simulated clock")
    return switchplot.figure(title, t.fast, t.slow, divergence)


def zoom_runs(curve, lo: float = ZOOM_RATIOS[0], hi: float = ZOOM_RATIOS[1]) -> tuple[list, list]:
    """(runs, their regime labels) of a curve between lo and hi, in budget order."""
    label = {}
    for regime in curve.regimes:
        for run in regime.runs:
            label[run.budget_bytes] = regime.label
    runs = [r for r in curve.runs if r.ratio is not None and lo <= r.ratio <= hi and r.feasible]
    return runs, [label.get(r.budget_bytes, "only") for r in runs]


def zoom_figure(trace: str, curve, pair):
    """The study's LSTM between ZOOM_RATIOS: one marker per budget, fast and slow regimes coloured,
    the study's pair labelled."""
    import matplotlib.pyplot as plt

    from .plots import LEGEND_OUTSIDE

    runs, labels = zoom_runs(curve)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    colours = {"fast": "#1f77b4", "slow": "#c0392b", "mixed": "#b7950b", "only": "#7f7f7f"}
    for name in ("fast", "slow", "mixed", "only"):
        xs = [r.ratio for r, lab in zip(runs, labels) if lab == name]
        ys = [r.overhead for r, lab in zip(runs, labels) if lab == name]
        if xs:
            ax.plot(xs, ys, "o", ms=3.5, color=colours[name], label=f"{name} regime ({len(xs)} budgets)")
    ax.plot([r.ratio for r in runs], [r.overhead for r in runs], "-", color="#bbbbbb", lw=0.6, zorder=0)
    for k, sw in enumerate(pair.switches):  # labels stacked in the plot's open middle, never on each other
        ax.annotate(f"{sw.fast.ratio:g} -> {sw.slow.ratio:g}: {sw.factor:.2f}x", xy=(sw.slow.ratio, sw.slow.overhead),
                    xytext=(0.3, 0.8 - 0.1 * k), textcoords="axes fraction", fontsize=8,
                    arrowprops={"arrowstyle": "->", "lw": 0.6, "color": "#555555"})
        ax.plot([sw.fast.ratio], [sw.fast.overhead], "o", ms=8, mfc="none", mec="k", mew=1.2)
    ax.set_yscale("log")
    ax.set_xlim(*ZOOM_RATIOS)
    ax.set_xlabel("memory budget (ratio of the unconstrained peak), 0.001 steps")
    ax.set_ylabel("overhead (log)")
    ax.set_title(f"{trace} / {SUBJECT_POLICY}: the switches between {ZOOM_RATIOS[0]} and {ZOOM_RATIOS[1]}, "
                 "one marker per budget (study's pair circled)")
    ax.legend(**LEGEND_OUTSIDE)
    ax.grid(True, which="both", alpha=0.25)
    return fig
