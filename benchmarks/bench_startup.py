"""CLI start-up: whole `dtrlab` processes, as a user runs them, medians of N runs each.

Times `dtrlab --help`, `import dtrlab.cli`, and a cached `dtrlab simulate` of the shipped resnet32
at ratio 0.5 (the program cache warmed once, in a temporary folder), beside the interpreter's own
start-up. Prints the median wall time and the median CPU time (user + system) of the process:
on a shared machine the CPU time moves less with the load. Run: `make bench` or
`python benchmarks/bench_startup.py [--repeat N]`.
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


def process_seconds(args: list[str], env: dict, repeat: int) -> tuple[float, float]:
    """Median wall and median CPU seconds of `repeat` runs of the interpreter with `args`."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own resource usage
        wall.append(time.perf_counter() - t0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(args)}: exit status {os.waitstatus_to_exitcode(status)}")
        cpu.append(usage.ru_utime + usage.ru_stime)
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--smoke", action="store_true", help="one process a case (CI: it must run)")
    args = ap.parse_args()
    if args.smoke:
        args.repeat = 1
    with tempfile.TemporaryDirectory() as cache:
        # A private cache folder: the benchmark neither reads nor fills the user's cache.
        env = {**os.environ, "DTRLAB_CACHE_DIR": cache}
        # Warm once: the cached simulate then reads the lowered program and its baseline.
        subprocess.run([sys.executable, *CASES[-1][1]], env=env, check=True, stdout=subprocess.DEVNULL)
        print(f"CLI start-up, medians of {args.repeat} processes")
        print(f"  {'':<56}{'wall ms':>9}{'CPU ms':>9}")
        for label, argv in CASES:
            wall_s, cpu_s = process_seconds(argv, env, args.repeat)
            print(f"  {label:<56}{wall_s * 1e3:9.1f}{cpu_s * 1e3:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
