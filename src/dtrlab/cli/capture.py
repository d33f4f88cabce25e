"""The `dtrlab capture` command, added to the CLI by `register(app)`: record a zoo model or a user's step.

A thin layer: torch is imported only when the command runs, so the CLI works without the extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ..formats import bytes_text, ns_text
from .options import BATCH_OPT, DEVICE_OPT, MODEL_ARG, SCRIPT_OPT, SIZE_OPT, steps_opt
from ..capture.factory import make_step
from ..output import print_json


# The step's options, declared once: `dtrlab run` takes the same (typer reuses a declaration).


def capture(
    model: Optional[str] = MODEL_ARG,
    script: Optional[str] = SCRIPT_OPT,
    batch: Optional[int] = BATCH_OPT,
    device: str = DEVICE_OPT,
    repeat: int = steps_opt(1, "Record K steps after a warm-up; times are medians.", "--repeat"),
    size: Optional[List[str]] = SIZE_OPT,
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Trace file (.log, .jsonl, or .gz to compress); "
                                            "default MODEL-BATCH.log.gz."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Record one training step (forward, loss, backward) of a model as a DTR trace."""
    if repeat < 1:
        raise UsageError(f"--repeat must be at least 1, got {repeat}")
    step, label, kwargs = make_step(model, script, batch, device, size)
    import torch
    from ..capture.peakgap import peak_gap
    from ..capture.recorder import record_median
    from ..capture.save import save, to_program, to_text

    sync = torch.cuda.synchronize if device == "cuda" else None
    result = record_median(step, repeat=repeat, warmup=1, sync=sync)
    path = out or Path(f"{label}-{kwargs.get('batch', 'custom')}.log.gz")
    save(result, path)
    text = to_text(result, label)
    peaks = peak_gap(text, result.peak_bytes)
    summary = {"trace": str(path), "model": label, "batch": kwargs.get("batch"), "device": device,
               "repeat": repeat, "operators": result.operators, "compute_ns": to_program(result, label).compute_ns,
               "recorded_peak_bytes": result.peak_bytes, "simulated_peak_bytes": peaks.simulated_peak_bytes,
               "in_place_peak_bytes": peaks.in_place_peak_bytes,
               "mutated_bytes": result.mutated_bytes, "torch": torch.__version__}
    if summary["batch"] is None:  # a script's factory that takes no batch
        del summary["batch"]
    if as_json:
        print_json(summary)
        return
    _print_summary(summary)


def _print_summary(summary: dict) -> None:
    """The capture's figures, bytes and times as people read them, and why its two peaks differ."""

    shown = {"trace": summary["trace"], "model": summary["model"], "batch": summary.get("batch"),
             "device": summary["device"], "repeat": summary["repeat"],
             "operators": f"{summary['operators']:,}", "compute": ns_text(summary["compute_ns"]),
             "simulated peak": bytes_text(summary["simulated_peak_bytes"]),
             "plain step's peak": bytes_text(summary["recorded_peak_bytes"]),
             "written in place": bytes_text(summary["mutated_bytes"]), "torch": summary["torch"]}
    for key, value in shown.items():
        if value is not None:
            typer.echo(f"{key:18} {value}")
    typer.echo("The simulated peak is the trace's unbounded run, what --ratio is a fraction of "
               "(simulate, scan and run alike).")
    simulated, plain = summary["simulated_peak_bytes"], summary["recorded_peak_bytes"]
    if simulated != plain:
        explained = ("written in place instead, the trace peaks at the plain step's "
                     f"{plain:,} bytes" if summary["in_place_peak_bytes"] == plain else
                     f"written in place instead, it peaks at {summary['in_place_peak_bytes']:,} bytes")
        typer.echo(f"It is {simulated - plain:,} bytes ({100 * (simulated - plain) / plain:.1f}%) above the plain "
                   "PyTorch step's (live storages counted once each): the trace writes in place into a copy of "
                   "the written storage (MUTATE), as the live runtime does, and a written constant (a parameter, "
                   f"an optimizer's state) keeps its original; {explained} (docs/capture.md).")


def register(app: typer.Typer) -> None:
    app.command("capture")(capture)
