"""Policies as data: what a score written as a formula costs, against the alternatives.

On the compiled engine, `dtr` as a formula (the postfix interpreter) against `dtr` as it was
before policies were data (the hard-wired score switch, built from git ref BEFORE_REF in a
temporary folder and run in this same process); on the Python engine, the formula against the
same score as a Python function over StorageFeatures; and the compiled formula against that
function, the way a user's policy ran before. Medians of repeated runs, and their ratios.
Run: `python benchmarks/bench_policies.py [--repeat N] [--before REF]`.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import math
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np

from dtrlab.sim import cengine
from dtrlab.sim.policies import formula_policy, get_policy, register_policy
from dtrlab.sim.simulate import budget_from_ratio, simulate

from _timing import SMOKE_HELP, median_seconds, public_programs, smoke_programs  # noqa: E402  (benchmarks/ is on sys.path)

REPO = Path(__file__).resolve().parents[1]
BEFORE_REF = "e65241c"  # the last commit with the hard-wired score switch in _cengine.c
CASES = [("lstm", 0.15), ("lstm", 0.5), ("resnet32", 0.2)]
DTR_TEXT = "score: (compute + estar) / (size * staleness)"


def _dtr_function(f):
    den = f.size_bytes * f.staleness_ns
    return (f.compute_ns + f.neighborhood_ns) / den if den > 0 else math.inf


def _build_before(ref: str, folder: Path):
    """The compiled engine of `ref`, built from its _cengine.c and loaded beside today's."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:src/dtrlab/sim/_cengine.c"],
                            capture_output=True, text=True, check=True).stdout
    c_file, so_file = folder / "_cengine.c", folder / "_cengine_before.so"
    c_file.write_text(source)
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    subprocess.run([*cc, "-O2", "-std=gnu99", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
                    str(c_file), "-o", str(so_file)], check=True, capture_output=True)
    loader = importlib.machinery.ExtensionFileLoader("_cengine", str(so_file))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("_cengine", loader))
    loader.exec_module(module)
    return module


def _before_runner(module, program, budget: int):
    """One DTR run on the old engine: its positional buffers and (e*, size, staleness) shape."""
    bufs = cengine._prepared(program)
    # the old engine took 21 arrays by position: storage roots after the sizes, and no s_const
    old_order = [*cengine._BUFFER_NAMES[:10], "storage_root", *cengine._BUFFER_NAMES[10:20]]
    arrays = {**bufs, "storage_root": np.ascontiguousarray(program.storage_root.astype(np.int32))}
    positional = tuple(arrays[name] for name in old_order)
    # NUM_E, divide by size, divide by staleness, SPECIAL_SCORE; eager, regions, no eq classes
    return lambda: module.run(positional, budget, 0, 1, 1, 0, 1, 1, 0, math.inf, 0, None, False, False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--python-repeat", type=int, default=3)
    ap.add_argument("--before", default=BEFORE_REF, help="git ref of the engine to compare with")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    cases = CASES[:1] if args.smoke else CASES
    if args.smoke:
        args.repeat = args.python_repeat = 1
    programs = (smoke_programs if args.smoke else public_programs)(c[0] for c in cases)
    if programs is None:
        return 0
    dtr, formula = get_policy("dtr"), formula_policy(DTR_TEXT)
    function = register_policy("bench-dtr-function", _dtr_function, {"regions"})
    with tempfile.TemporaryDirectory() as tmp:
        try:
            before = _build_before(args.before, Path(tmp))
        except (subprocess.CalledProcessError, OSError, ImportError) as exc:
            before = None
            print(f"(before: not built from {args.before}: {exc})")
        print(f"policy benchmark: DTR on eager-optimized, median ms of {args.repeat} runs "
              f"(Python engine: {args.python_repeat})")
        head = ("trace", "ratio", "C before", "C formula", "ratio", "py function", "py formula", "ratio",
                "C formula vs py function")
        print(f"{head[0]:<10}{head[1]:>6}{head[2]:>10}{head[3]:>11}{head[4]:>7}{head[5]:>13}{head[6]:>12}"
              f"{head[7]:>7}{head[8]:>26}")
        for name, ratio in cases:
            program = programs[name]
            budget = budget_from_ratio(program, ratio)
            want = simulate(program, budget, dtr)
            for pol in (formula, function):
                got = simulate(program, budget, pol)
                assert (got.clock_ns, got.evictions) == (want.clock_ns, want.evictions), pol.name
            c_formula = median_seconds(lambda: simulate(program, budget, formula, engine="c"), args.repeat, True)
            c_before = None
            if before is not None:
                run = _before_runner(before, program, budget)
                assert run()["clock_ns"] == want.clock_ns
                c_before = median_seconds(run, args.repeat, True)
            py_function = median_seconds(lambda: simulate(program, budget, function, engine="python"),
                                         args.python_repeat)
            py_formula = median_seconds(lambda: simulate(program, budget, formula, engine="python"),
                                        args.python_repeat)
            before_ms = f"{c_before * 1e3:.1f}" if c_before else "-"
            before_ratio = f"{c_formula / c_before:.2f}" if c_before else "-"
            print(f"{name:<10}{ratio:>6}{before_ms:>10}{c_formula * 1e3:>11.1f}{before_ratio:>7}"
                  f"{py_function * 1e3:>13.0f}{py_formula * 1e3:>12.0f}{py_formula / py_function:>7.2f}"
                  f"{py_function / c_formula:>25.0f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
