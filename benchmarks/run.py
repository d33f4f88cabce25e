"""Runs every benchmarks/bench_*.py as a script, one after another, and prints their output.

`make bench` calls it; `python benchmarks/run.py read engine` runs only the benchmarks named;
`--smoke` runs each once at its smallest size (tests/test_benchmarks.py does, marked slow).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def main(argv: list[str]) -> int:
    # --smoke: each benchmark once at its smallest size (what CI runs, so none can rot)
    smoke = ["--smoke"] if "--smoke" in argv else []
    argv = [a for a in argv if a != "--smoke"]
    scripts = sorted(HERE.glob("bench_*.py"))
    if argv:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in argv or s.stem in argv]
        if not scripts:
            print(f"no benchmark named {', '.join(argv)}", file=sys.stderr)
            return 2
    # Run from a checkout without installing: src/ goes first on the path.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    failed = []
    for script in scripts:
        print(f"== {script.name}", flush=True)
        t0 = time.perf_counter()
        # Each benchmark in its own process: no warm caches or imports carried from the last one.
        rc = subprocess.run([sys.executable, str(script), *smoke], env=env).returncode
        print(f"== {script.name}: {'ok' if rc == 0 else f'exit code {rc}'} in {time.perf_counter() - t0:.1f} s\n",
              flush=True)
        if rc != 0:
            failed.append(script.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
