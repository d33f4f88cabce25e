"""CLI start-up: whole `dtrlab` processes, as a user runs them, median wall time of N runs each.

Times `dtrlab --help`, `import dtrlab.cli`, and a cached `dtrlab simulate` of the shipped resnet32
at ratio 0.5 (the program cache warmed once, in a temporary folder), beside the interpreter's own
start-up. Run: `make bench` or `python benchmarks/bench_startup.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

# What the `dtrlab` console script runs; spelled out so the benchmark needs no install.
DTRLAB = "import sys; from dtrlab.cli import main; sys.argv[0] = 'dtrlab'; main()"

CASES = (
    ("python -c pass (the floor)", ["-c", "pass"]),
    ("python -c 'import dtrlab.cli'", ["-c", "import dtrlab.cli"]),
    ("dtrlab --help", ["-c", DTRLAB, "--help"]),
    ("dtrlab simulate --trace resnet32 --ratio 0.5 (cached)",
     ["-c", DTRLAB, "simulate", "--trace", "resnet32", "--ratio", "0.5"]),
)


def process_seconds(args: list[str], env: dict, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        # A private cache folder: the benchmark neither reads nor fills the user's cache.
        env = {**os.environ, "DTRLAB_CACHE_DIR": cache}
        # Warm once: the cached simulate then reads the lowered program and its baseline.
        subprocess.run([sys.executable, *CASES[-1][1]], env=env, check=True, stdout=subprocess.DEVNULL)
        print(f"CLI start-up, median wall time of {args.repeat} processes")
        for label, argv in CASES:
            print(f"  {label:<56}{process_seconds(argv, env, args.repeat) * 1e3:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
