"""Sweeps end to end on resnet32: local and Dask executors, resume after kill -9, timeouts, refinement."""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dtrlab.errors import UsageError
from dtrlab.sim.simulate import budget_from_ratio
from dtrlab.sweep.run import refine_specs, run_sweep
from dtrlab.sweep.store import Store, results_dataframe
from dtrlab.sweep.worker import Worker
from sweep_helpers import HELD_DTR, HERE, HOLD, TRACES, needs_shared, oracle, program, resnet_specs, result_rows

pytestmark = needs_shared
SRC = Path(__file__).resolve().parents[2] / "src"
RATIOS = [0.15, 0.2, 0.25, 0.3]
POLICIES = ["dtr", "dtr-local"]


@pytest.fixture(scope="module")
def local_store(tmp_path_factory):
    """The reference sweep: local executor, two workers, stored once for the module."""
    path = tmp_path_factory.mktemp("local") / "results.duckdb"
    summary = run_sweep(resnet_specs(RATIOS, POLICIES), path, workers=2, progress=False)
    assert summary.ran == len(RATIOS) * len(POLICIES) and not summary.interrupted
    return path


@pytest.mark.slow
def test_local_sweep_stores_what_simulate_gives(local_store):
    frame = results_dataframe(local_store)
    specs = resnet_specs(RATIOS, POLICIES)
    assert sorted(frame["key"]) == sorted(s.key for s in specs)
    rows = frame.set_index("key")
    for spec in specs:
        result = oracle(spec)
        row = rows.loc[spec.key]
        assert (row["outcome"], row["clock_ns"], row["evictions"], row["distinct_evicted"],
                row["eager_evictions"], row["peak_bytes"], row["remat_ns"]) == \
            (result.outcome, result.clock_ns, result.evictions, result.distinct_evicted,
             result.eager_evictions, result.peak_bytes, result.remat_ns)
        # a run that did not finish has no overhead: None in the result, a missing value (NaN) in the frame
        assert (row["overhead"] == result.overhead if result.ok else
                result.overhead is None and math.isnan(row["overhead"])) and row["ratio"] == spec.ratio


@pytest.mark.slow
def test_a_second_sweep_skips_what_is_stored(local_store):
    before = result_rows(results_dataframe(local_store))
    specs = resnet_specs(RATIOS + [0.35], POLICIES)
    summary = run_sweep(specs, local_store, workers=2, progress=False)
    assert (summary.total, summary.skipped, summary.ran, summary.missing) == (10, 8, 2, 0)
    after = result_rows(results_dataframe(local_store))
    assert [r for r in after if r["ratio"] != 0.35] == before
    by_policy = {r.policy: r for r in summary.rows}
    assert set(by_policy) == set(POLICIES)
    for policy, row in by_policy.items():
        ok = [oracle(s) for s in specs if s.policy == policy]
        assert row.ok == sum(r.ok for r in ok) and row.oom == sum(r.outcome == "oom" for r in ok)
        assert row.timeout == 0 and row.remat_limit == 0
        assert row.min_overhead == min(r.overhead for r in ok if r.ok)
        assert row.max_overhead == max(r.overhead for r in ok if r.ok)


def test_dask_executor_gives_the_rows_of_the_local_one(local_store, tmp_path):
    path = tmp_path / "dask.duckdb"
    summary = run_sweep(resnet_specs(RATIOS, POLICIES), path, executor="dask", workers=2, progress=False)
    assert summary.ran == len(RATIOS) * len(POLICIES)
    local = [r for r in result_rows(results_dataframe(local_store)) if r["ratio"] in RATIOS]
    assert result_rows(results_dataframe(path)) == local


# --- kill -9 and resume -----------------------------------------------------------------------

SCRIPT = """
import sys
from dtrlab.sweep.grid import build_specs, parse_ratios
from dtrlab.sweep.run import run_sweep
from dtrlab.sweep.store import Store
from dtrlab.trace import load

source, store_path, engine = sys.argv[1:4]
specs = build_specs(source, load(source, ["resnet32"]), ["dtr"], ["eager-optimized"],
                    parse_ratios("0.1:0.2:0.005"), engine=engine)
store = Store(store_path)
put = store.put
def put_and_say(*args, **kwargs):
    put(*args, **kwargs)
    print("stored", flush=True)
store.put = put_and_say
summary = run_sweep(specs, store, workers=2, progress=False)
print("done", summary.total, summary.skipped, summary.ran, flush=True)
"""
KILL_RATIOS = [round(0.1 + 0.005 * i, 3) for i in range(21)]


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has stopped; only its exit status waits to be read


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker processes through /proc")
def test_kill_minus_nine_then_resume_stores_every_run_once(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(SCRIPT)
    path = tmp_path / "killed.duckdb"
    env = dict(os.environ, PYTHONPATH=str(SRC))
    # A process of its own: kill -9 of a sweep and its orphaned workers are the test.
    # The pure-Python engine keeps every run slow enough to be caught mid-sweep.
    argv = [sys.executable, str(script), str(TRACES), str(path), "python"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    stored = 0
    for line in proc.stdout:
        stored += line.startswith("stored")
        if stored == 3:
            break
    workers = _children(proc.pid)
    # Handles on the workers' ends, taken while their parent lives (so the pids are still theirs).
    ends = [os.pidfd_open(w) for w in workers]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert len(workers) == 2
    # Orphaned workers notice and exit (within a second): wait for the exits themselves, a handle
    # becoming readable when its process ends (the bound is only for a worker that never does).
    try:
        select.select(ends[:1], [], [], 60)
        select.select(ends[1:], [], [], 60)
    finally:
        for fd in ends:
            os.close(fd)
    assert not any(_alive(w) for w in workers)

    partial = results_dataframe(path)
    assert 3 <= len(partial) < len(KILL_RATIOS)

    # Resume on the default engine: the engine is not part of a key, and results do not depend on it.
    out = subprocess.run(argv[:-1] + ["auto"], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    assert out[-4:] == ["done", str(len(KILL_RATIOS)), str(len(partial)), str(len(KILL_RATIOS) - len(partial))]
    assert out.count("stored") == len(KILL_RATIOS) - len(partial)

    resumed = results_dataframe(path)
    assert len(resumed) == resumed["key"].nunique() == len(KILL_RATIOS)
    assert sorted(resumed["ratio"]) == KILL_RATIOS
    # Rows stored before the kill are untouched by the resume.
    assert [r for r in result_rows(resumed) if r["key"] in set(partial["key"])] == result_rows(partial)

    whole = tmp_path / "whole.duckdb"
    run_sweep(resnet_specs(KILL_RATIOS), whole, workers=2, progress=False)
    assert result_rows(resumed) == result_rows(results_dataframe(whole))


# --- timeouts ---------------------------------------------------------------------------------


@pytest.fixture
def held_runs(monkeypatch):
    """Workers started now import held_dtr (from tests/sweep) and hold; `release()`, the fixture's value,
    lets the workers started after it run to the end."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv(HOLD, "1")
    return lambda: monkeypatch.delenv(HOLD)


def test_a_run_past_its_timeout_is_stopped_by_killing_its_process(held_runs):
    # The run's score never returns (held_dtr): any timeout, 20 ms here, is shorter than the run.
    spec = resnet_specs([0.1], [HELD_DTR])[0]
    worker = Worker()
    try:
        done = worker.run(spec, timeout_s=0.02)
        assert done.spec == spec and done.result.outcome == "timeout"
        assert worker.process.returncode == -signal.SIGKILL
    finally:
        worker.close(kill=True)


@pytest.mark.slow
def test_timeouts_are_stored_and_retried_only_with_more_time(tmp_path, held_runs):
    path = tmp_path / "t.duckdb"
    slow = resnet_specs([0.1], [HELD_DTR])[0]  # held: it cannot end within 20 ms, until release()
    quick = resnet_specs([0.3])[0]
    # One worker: after the timeout a fresh process must take over for the second run.
    first = run_sweep([slow, quick], path, workers=1, timeout_s=0.02, progress=False)
    assert (first.ran, first.missing) == (2, 0)
    with Store(path) as store:
        assert store.keys() == {slow.key, quick.key}
        timed_out = store.timed_out()
    assert timed_out[slow.key] == 0.02  # the quick run may time out too on the pure-Python engine
    assert run_sweep([slow, quick], path, workers=1, timeout_s=0.02, progress=False).ran == 0
    held_runs()  # release: the retry's fresh workers run held_dtr to its end
    again = run_sweep([slow, quick], path, workers=1, timeout_s=600, progress=False)
    assert again.ran == len(timed_out) and again.skipped == 2 - len(timed_out)
    rows = results_dataframe(path).set_index("key")
    for spec in (slow, quick):
        result = oracle(spec)
        assert (rows.loc[spec.key, "outcome"], rows.loc[spec.key, "clock_ns"]) == (result.outcome, result.clock_ns)
    assert rows.loc[slow.key, "timeout_s"] == 600


@pytest.mark.slow
def test_bad_timeout_and_worker_errors_are_usage_errors(tmp_path):
    path = tmp_path / "e.duckdb"
    spec = resnet_specs([0.3])[0]
    with pytest.raises(UsageError, match="timeout"):
        run_sweep([spec], path, timeout_s=0, progress=False)
    changed = replace(spec, trace_sha256="0" * 64)
    with pytest.raises(UsageError, match="changed since the sweep was planned") as info:
        run_sweep([changed], path, workers=1, progress=False)
    assert "\n" not in str(info.value)
    with pytest.raises(UsageError, match="no such file"):
        run_sweep([replace(spec, source=str(tmp_path / "gone"))], path, workers=1, progress=False)
    with pytest.raises(UsageError, match="unknown executor"):
        run_sweep([spec], path, executor="slurm", progress=False)
    assert results_dataframe(path).empty


# --- refinement -------------------------------------------------------------------------------


def test_refinement_adds_exact_ratios_where_results_jump(local_store, tmp_path):
    path = tmp_path / "refine.duckdb"
    coarse = resnet_specs([0.1, 0.2, 0.3])
    run_sweep(coarse, path, workers=2, progress=False)
    resnet = program("resnet32")
    with Store(path) as store:
        new = refine_specs(coarse, store, {resnet.sha256: resnet}, 2, 1.05)
    # By hand: resnet32's DTR overheads at 0.1, 0.2, 0.3 are 2.22, 1.37 and 1.18 (simrd's rows say
    # so too), so both neighbouring pairs differ by more than 5%: two new ratios inside each, on the
    # next decimal digit, at a third and two thirds of the gap, rounded.
    assert [oracle(s).overhead for s in coarse] == pytest.approx([2.2229, 1.3711, 1.1782], abs=1e-4)
    assert [s.ratio for s in new] == [0.13, 0.17, 0.23, 0.27]
    assert all(s.budget_bytes == budget_from_ratio(resnet, s.ratio) for s in new)
    assert {s.policy for s in new} == {"dtr"} and not {s.key for s in new} & {s.key for s in coarse}


@pytest.mark.slow
def test_a_semantics_bump_reruns_what_the_store_holds(local_store, tmp_path, monkeypatch):
    """Rows computed under an older semantics version are never served: the same grid runs again."""
    import dtrlab.sweep.grid as grid

    path = tmp_path / "bump.duckdb"
    specs = resnet_specs(RATIOS[:2])
    assert run_sweep(specs, path, workers=1, progress=False).ran == 2
    assert run_sweep(resnet_specs(RATIOS[:2]), path, workers=1, progress=False).ran == 0
    monkeypatch.setattr(grid, "SEMANTICS_VERSION", grid.SEMANTICS_VERSION + 1)
    bumped = resnet_specs(RATIOS[:2])
    summary = run_sweep(bumped, path, workers=1, progress=False)
    assert (summary.ran, summary.skipped) == (2, 0)
    with Store(path) as store:
        assert store.keys() == {s.key for s in specs} | {s.key for s in bumped}  # the old rows stay
