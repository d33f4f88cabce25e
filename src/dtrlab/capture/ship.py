"""The traces dtrlab ships: the zoo captured at modest sizes, gzipped, with a manifest.json.

Owns the shipped sizes and the manifest's metadata; `python -m dtrlab.capture.ship DIR` remakes them.
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
from pathlib import Path

import torch

from .recorder import record_median
from .save import save, to_program
from .zoo import ZOO
from ..sim.simulate import baseline

# One CPU thread: timings that a busy machine distorts least (no thread waits on another), and
# the conditions of the live runs measured on these traces (`dtrlab run --threads 1`).
SHIPPED_THREADS = 1

# Sizes that capture in seconds on a CPU and keep every file well under a megabyte or two.
SHIPPED_SIZES: dict[str, dict] = {
    "resnet32": dict(batch=8),
    "lstm": dict(batch=8, input_size=128, hidden=256, seq=32),
    "transformer": dict(batch=8),
    "unet": dict(batch=2),
    "densenet": dict(batch=4, blocks=(6, 12, 24, 16)),
}


def ship(out_dir: str | Path, repeat: int = 3) -> dict:
    """Capture each zoo model at its shipped size into out_dir; return (and write) the manifest."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(SHIPPED_THREADS)
    try:
        models = _capture_all(out, repeat)
    finally:
        torch.set_num_threads(threads)
    manifest = {"models": models}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _capture_all(out: Path, repeat: int) -> list[dict]:
    torch.manual_seed(0)
    models = []
    for name, sizes in SHIPPED_SIZES.items():
        step = ZOO[name].make(**sizes, device="cpu")
        capture = record_median(step, repeat=repeat, warmup=1)
        log = f"{name}-{sizes['batch']}-captured.log.gz"
        save(capture, out / log)
        program = to_program(capture, name)
        models.append({
            "name": f"{name} (captured, batch {sizes['batch']})", "log": log, "has_start": True,
            "model": name, "batch": sizes["batch"],
            "shapes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes.items()},
            "description": ZOO[name].description(**sizes), "torch": torch.__version__, "device": "cpu",
            "cpu": platform.processor() or platform.machine(), "threads": SHIPPED_THREADS, "repeat": repeat,
            "timing": "median over repeats after one warm-up (recorded, its trace dropped), "
                      "perf_counter_ns around each operator",
            "date": datetime.date.today().isoformat(), "operators": capture.operators,
            "recorded_peak_bytes": capture.peak_bytes, "simulated_peak_bytes": baseline(program).peak_bytes,
        })
    return models


if __name__ == "__main__":  # pragma: no cover
    ship(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "data" / "traces")
