"""The report's figures (matplotlib, Agg): overhead curves, feasibility strips, eviction histograms,
memory near an OOM, the ablation heatmap, the optimal baselines, the checkpointing comparison's peak
against step time. Each function draws one figure and returns it."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display, ever: the report is written on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from ..sim.result import OK, OOM, REMAT_LIMIT  # noqa: E402

OUTCOME_COLOURS = {OK: "#4c9f70", OOM: "#c0392b", REMAT_LIMIT: "#e67e22"}
REGIME_COLOURS = {"fast": "#d6eaf8", "slow": "#fadbd8", "mixed": "#fcf3cf", "only": "#eeeeee"}
POLICY_COLOURS = {"dtr": "#1f77b4", "dtr-eq": "#17becf", "dtr-local": "#9467bd", "msps": "#2ca02c",
                  "lru": "#ff7f0e", "size": "#8c564b", "random": "#7f7f7f"}


# The same figure must give the same bytes, so a rerun gives the same report: no date in the SVG
# (matplotlib writes dc:date by default), and the SVG's element ids hashed with a fixed salt instead
# of a random one. The PNG's only text chunk is "Software: matplotlib version ...", which is stable.
SVG_METADATA = {"Date": None}
# Every legend sits outside its axes (right of them), so it never covers a curve, a bar or a marker.
LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "fontsize": 8}
SVG_HASH_SALT = "dtrlab"


def files(folder: Path, name: str) -> tuple[Path, Path]:
    """Where `save` writes a figure: name.png and name.svg in folder."""
    return folder / f"{name}.png", folder / f"{name}.svg"


def save(fig, folder: Path, name: str) -> tuple[Path, Path]:
    """Write name.png and name.svg, the same bytes for the same figure; close the figure."""
    folder.mkdir(parents=True, exist_ok=True)
    png, svg = files(folder, name)
    # The tight box measured once, for both files: "tight" would draw the figure once more per file.
    box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(matplotlib.rcParams["savefig.pad_inches"])
    fig.savefig(png, dpi=110, bbox_inches=box)
    with matplotlib.rc_context({"svg.hashsalt": SVG_HASH_SALT}):
        fig.savefig(svg, bbox_inches=box, metadata=SVG_METADATA)
    plt.close(fig)
    return png, svg


def overhead_curves(trace: str, curves: dict, subject: str, cap: float):
    """Overhead against ratio for every policy of one trace; the subject's regimes shaded,
    infeasible budgets marked under the curves."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    for regime in curves[subject].regimes if subject in curves else []:
        if regime.label in ("fast", "slow"):
            ax.axvspan(regime.first.ratio - 0.0005, regime.last.ratio + 0.0005,
                       color=REGIME_COLOURS[regime.label], zorder=0, lw=0)
    floor = None
    feasible = [r.overhead for c in curves.values() for r in c.runs if r.feasible and r.overhead is not None]
    floor = min(feasible) / 1.15 if feasible else 0.9
    for k, (policy, curve) in enumerate(sorted(curves.items())):
        colour = POLICY_COLOURS.get(policy, f"C{k}")
        ok = [r for r in curve.runs if r.feasible and r.ratio is not None]
        ax.plot([r.ratio for r in ok], [r.overhead for r in ok], "-", color=colour, lw=1.3 if policy == subject else 1,
                marker="." if len(ok) < 40 else None, ms=4, label=policy, zorder=3 if policy == subject else 2)
        bad = [r for r in curve.runs if r.infeasible and r.ratio is not None]
        if bad:
            ax.plot([r.ratio for r in bad], [floor * (0.97 ** k)] * len(bad), "x", color=colour, ms=5, mew=1.2, zorder=4)
    ax.set_yscale("log")
    ax.set_xlabel("memory budget (ratio of the unconstrained peak)")
    ax.set_ylabel("overhead (runtime / baseline compute, log)")
    ax.set_title(f"{trace}: overhead against budget, all policies ({subject} regimes shaded)")
    handles, labels = ax.get_legend_handles_labels()
    handles += [Patch(color=REGIME_COLOURS["fast"], label=f"{subject} fast regime"),
                Patch(color=REGIME_COLOURS["slow"], label=f"{subject} slow regime"),
                plt.Line2D([], [], ls="", marker="x", color="k", label=f"infeasible (OOM, or overhead > {cap:g})")]
    ax.legend(handles=handles, **LEGEND_OUTSIDE)
    ax.grid(True, which="both", alpha=0.25)
    return fig


# A budget the fine grid did not run is left white: refinement (report.refine) runs every budget
# between two neighbours that differ, so a white stretch lies between budgets that agree.
NOT_RUN = "white: not run (the budgets on both sides agree in outcome, overheads within the switch factor)"


def feasibility_strip(rows: list[tuple[str, list]], policy: str, step: float = 0.001):
    """One strip per trace over its fine grid: each budget run coloured by outcome, `step` wide;
    budgets not run stay white."""
    fig, axes = plt.subplots(len(rows), 1, figsize=(9, 0.9 + 0.75 * len(rows)), squeeze=False)
    for ax, (trace, runs) in zip(axes[:, 0], rows):
        ratios = np.array([r.ratio for r in runs])
        for r in runs:
            ax.axvspan(r.ratio - step / 2, r.ratio + step / 2, color=OUTCOME_COLOURS.get(r.outcome, "#cccccc"), lw=0)
        ax.set_xlim(ratios.min() - step / 2, ratios.max() + step / 2)
        ax.set_yticks([])
        ax.set_ylabel(trace, rotation=0, ha="right", va="center")
        for side in ax.spines.values():
            side.set_color("#999999")
    axes[-1, 0].set_xlabel(f"memory budget (ratio of the unconstrained peak), fine grid ({step:g} steps)")
    axes[0, 0].set_title(f"Feasibility over the fine grid ({policy})")
    handles = [Patch(color=c, label=o) for o, c in OUTCOME_COLOURS.items()]
    handles.append(Patch(facecolor="white", edgecolor="#999999", label=NOT_RUN.replace(": ", ":\n", 1)))
    axes[0, 0].legend(handles=handles, **LEGEND_OUTSIDE)
    fig.tight_layout()
    return fig


def eviction_histograms(trace: str, policy: str, fast: tuple[float, np.ndarray], slow: tuple[float, np.ndarray]):
    """Evictions per evicted storage in the fast and the slow run of a switch."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    top = int(max(fast[1].max(initial=1), slow[1].max(initial=1)))
    bins = np.arange(0.5, top + 1.5, 1) if top <= 60 else np.unique(np.geomspace(1, top + 1, 40).round()) - 0.5
    for (ratio, counts), colour, name in ((fast, "#1f77b4", "fast"), (slow, "#c0392b", "slow")):
        ax.hist(counts, bins=bins, alpha=0.55, color=colour,
                label=f"{name}: ratio {ratio:g}, {len(counts):,} storages, mean {counts.mean() if len(counts) else 0:.2f}")
    ax.set_yscale("log")
    ax.set_xlabel("evictions of a storage (policy + eager), among storages evicted at least once")
    ax.set_ylabel("storages (log)")
    ax.set_title(f"{trace} / {policy}: evictions per evicted storage, fast vs slow run")
    ax.legend(**LEGEND_OUTSIDE)
    ax.grid(True, alpha=0.25)
    return fig


def memory_near_oom(trace: str, policy: str, ratio, series: np.ndarray, budget_bytes: int, pinned_bytes: int,
                    frontier_bytes: int, tail: int = 600):
    """Memory over the last `tail` changes before an OOM, with the budget and what stayed pinned."""
    fig, ax = plt.subplots(figsize=(9, 4.2))
    part = series[-tail:] if len(series) else np.zeros((1, 2), np.int64)
    mib = 2.0 ** 20
    ax.step(part[:, 0] / 1e6, part[:, 1] / mib, where="post", color="#1f77b4", lw=1, label="resident memory")
    # The legend gives bytes, not rounded MiB: at an OOM the last few bytes decide.
    ax.axhline(budget_bytes / mib, color="#c0392b", ls="--", lw=1.2, label=f"budget ({budget_bytes:,} B)")
    ax.axhline(pinned_bytes / mib, color="#7f7f7f", ls=":", lw=1.2, label=f"pinned at the OOM ({pinned_bytes:,} B)")
    ax.axhline(frontier_bytes / mib, color="#8e44ad", ls="-.", lw=1.2,
               label=f"pinned + locked at the OOM ({frontier_bytes:,} B)")
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel("memory (MiB)")
    label = f"ratio {ratio:g}" if ratio is not None else f"{budget_bytes:,} B"
    ax.set_title(f"{trace} / {policy} at {label}: memory before the OOM")
    ax.legend(**LEGEND_OUTSIDE)
    ax.grid(True, alpha=0.25)
    return fig


def ablation_heatmap(trace: str, ratios: tuple[float, ...], curves: dict):
    """Variant x budget, colour = overhead (log), hatched = out of memory."""
    names = list(curves)
    grid = np.full((len(names), len(ratios)), np.nan)
    outcome = np.full((len(names), len(ratios)), "", dtype=object)
    col = {r: j for j, r in enumerate(ratios)}
    for i, name in enumerate(names):
        for run in curves[name].runs:
            j = col.get(run.ratio)
            if j is None:
                continue
            outcome[i, j] = run.outcome
            if run.feasible:
                grid[i, j] = run.overhead
    fig, ax = plt.subplots(figsize=(max(7, 0.45 * len(ratios) + 3), 0.38 * len(names) + 1.8))
    finite = grid[np.isfinite(grid)]
    norm = LogNorm(vmin=max(finite.min(), 1.0), vmax=max(finite.max(), 1.01)) if finite.size else None
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap="viridis", norm=norm)
    for i in range(len(names)):
        for j in range(len(ratios)):
            if outcome[i, j] in (OOM, REMAT_LIMIT):
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="xxx" if outcome[i, j] == OOM
                                           else "///", edgecolor=OUTCOME_COLOURS[outcome[i, j]], lw=0))
    ax.set_xticks(range(len(ratios)), [f"{r:g}" for r in ratios], rotation=60, fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlabel("memory budget (ratio of the unconstrained peak)")
    ax.set_title(f"{trace}: ablations of the DTR score")
    fig.colorbar(image, ax=ax, label="overhead (log)")
    # White cells have no overhead to colour: the hatch says why.
    fig.legend(handles=[Patch(facecolor="white", edgecolor=OUTCOME_COLOURS[OOM], hatch="xxx", label="white, x hatch:\nOOM"),
                        Patch(facecolor="white", edgecolor=OUTCOME_COLOURS[REMAT_LIMIT], hatch="///",
                              label="white, / hatch:\noverhead cap\n(remat_limit)")],
               loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8)
    fig.tight_layout()
    return fig


# The baselines figure's four curves, by the SVG ids (gid) they are drawn under, and their legends.
BASELINE_CURVES = {
    "dtr": "DTR",
    "dtr-envelope": "DTR's envelope (its least overhead at any budget up to this one)",
    "best-found": "best schedule found (the solver's, replayed by the checker)",
    "lower-bound": "lower bound (no schedule beats it)",
}


def optimal_baselines(trace: str, points):
    """Overhead against ratio on one trace (report.baselines Points): DTR's runs, DTR's envelope, the best
    schedule the solver found, the lower bound; x under the curves: DTR out of memory (or past the cap)."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    pts = [p for p in points if p.ratio is not None]

    def series(value):
        kept = [(p.ratio, value(p)) for p in pts if value(p) is not None and np.isfinite(value(p))]
        return [r for r, _ in kept], [v for _, v in kept]

    x, y = series(lambda p: p.dtr)
    ax.plot(x, y, "-", color=POLICY_COLOURS["dtr"], lw=1, marker="." if len(x) < 60 else None, ms=4,
            label=BASELINE_CURVES["dtr"], gid="dtr", zorder=2)
    x, y = series(lambda p: p.envelope)
    ax.step(x, y, where="post", color="#17becf", lw=1.8, ls="--", label=BASELINE_CURVES["dtr-envelope"],
            gid="dtr-envelope", zorder=3)
    x, y = series(lambda p: p.best)
    none = "" if x else ": none (the bound alone, or no schedule found in time)"
    ax.plot(x, y, "s", color="#2ca02c", ms=6, mfc="none", mew=1.4, label=BASELINE_CURVES["best-found"] + none,
            gid="best-found", zorder=4)
    x, y = series(lambda p: p.bound)
    ax.plot(x, y, "v:", color="#8e44ad", ms=5, lw=1, label=BASELINE_CURVES["lower-bound"], gid="lower-bound",
            zorder=4)
    finite = [v for p in pts for v in (p.dtr, p.envelope, p.best, p.bound) if v is not None and np.isfinite(v)]
    floor = min(finite) / 1.1 if finite else 0.9
    failed = [p.ratio for p in pts if p.dtr_outcome in (OOM, REMAT_LIMIT)]
    if failed:
        ax.plot(failed, [floor] * len(failed), "x", color=POLICY_COLOURS["dtr"], ms=5, mew=1.2, gid="dtr-failed",
                label="DTR out of memory (or past the overhead cap)")
    ax.set_yscale("log")
    ax.set_xlabel("memory budget (ratio of the unconstrained peak)")
    ax.set_ylabel("overhead (runtime / baseline compute, log)")
    ax.set_title(f"{trace}: DTR against the best schedule found and a lower bound")
    ax.legend(**LEGEND_OUTSIDE)
    ax.grid(True, which="both", alpha=0.25)
    return fig


# The checkpointing comparison's modes (dtrlab.compare's names): colour and marker of each one's curve.
MODE_STYLES = {"plain": ("k", "o"), "checkpoint": ("tab:blue", "s"), "sac": ("tab:green", "^"),
               "staged": ("tab:red", "D"), "compile": ("tab:purple", "v"),
               "compile-dtr": ("tab:orange", "P")}
ALLOCATOR_COUNT = " (allocator count)"  # after the label of a curve whose peaks the allocator counted
PEAK_UNITS = (("MiB", 1024 * 1024), ("KiB", 1024))  # the first whose size the largest peak reaches


def checkpointing_curves(results: dict):
    """Each model of `results` (model -> (its dtrlab.compare Points, plain eager's peak by the allocator's
    count in bytes or None)) in a panel of its own: measured peak (x, MiB) against the median step time
    (y, ms), one curve a mode through its points in order of peak, each point labelled with its setting
    (the staged ratio, the compiled budget); a mode skipped has no points. Peaks in MiB, or KiB when no
    peak reaches a MiB. Points counted by the allocator (compiled) are hollow, beside plain's allocator
    count when it is given. One legend for every panel, outside the first row's last."""
    if not results:
        raise ValueError("no model to draw")
    names = list(results)
    largest = max((p.peak_bytes for points, _ in results.values() for p in points if p.peak_bytes is not None),
                  default=0)
    unit, unit_bytes = next(((u, b) for u, b in PEAK_UNITS if largest >= b), PEAK_UNITS[-1])
    cols = min(len(names), 3)
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    legend: dict = {}  # label -> handle, every panel's, in order of first appearance
    for ax, name in zip(axes.flat, names):
        points, plain_allocator_peak_bytes = results[name]
        for mode, (colour, marker) in MODE_STYLES.items():
            ps = sorted((p for p in points if p.mode == mode and p.peak_bytes is not None), key=lambda p: p.peak_bytes)
            if not ps:
                continue
            hollow = ps[0].peak_kind == "allocator"
            ax.plot([p.peak_bytes / unit_bytes for p in ps], [p.step_s * 1e3 for p in ps], marker=marker, color=colour,
                    linestyle="-" if len(ps) > 1 else "none", markerfacecolor="none" if hollow else colour,
                    label=mode + (ALLOCATOR_COUNT if hollow else ""), gid=mode)
            for p in ps:
                if p.setting is not None:
                    ax.annotate(f"{p.setting:g}", (p.peak_bytes / unit_bytes, p.step_s * 1e3), fontsize=6,
                                xytext=(2, 2), textcoords="offset points", color=colour)
        plain = next((p for p in points if p.mode == "plain" and p.step_s is not None), None)
        if plain_allocator_peak_bytes is not None and plain is not None:
            ax.plot([plain_allocator_peak_bytes / unit_bytes], [plain.step_s * 1e3], marker="o", color="k",
                    markerfacecolor="none", linestyle="none", label="plain" + ALLOCATOR_COUNT, gid="plain-allocator")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(f"measured peak ({unit})")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        ax.set_ylabel("median step (ms)")
        ax.grid(alpha=0.3)
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    axes[0, -1].legend(list(legend.values()), list(legend), **LEGEND_OUTSIDE)
    fig.tight_layout()
    return fig
