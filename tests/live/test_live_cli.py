"""`dtrlab run`: its figures are a LiveSession's run of the same step done here by hand, its
simulated column is `simulate` on the trace captured of the same step; mistakes are one line."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from conftest import cli_invoke  # noqa: E402
from dtrlab.capture.recorder import record  # noqa: E402
from dtrlab.capture.save import save, to_program  # noqa: E402
from dtrlab.capture.zoo import ZOO  # noqa: E402
from dtrlab.live.session import LiveBudgetError, LiveSession  # noqa: E402
from dtrlab.sim.simulate import budget_from_ratio, simulate  # noqa: E402


def _sizes(name: str, **over) -> list[str]:
    return [arg for k, v in {**ZOO[name].tiny, **over}.items() for arg in ("--size", f"{k}={json.dumps(v)}")]


def _prepared(name: str, monkeypatch, **sizes):
    """The step as the command prepares it, written out: the model made after seeding torch with 0,
    a plain step, the capture (the plan). The capture's times are measured, so they differ from run
    to run: the command is given this same capture (its recorder patched)."""
    torch.manual_seed(0)
    step = ZOO[name].make(**{**ZOO[name].tiny, **sizes})
    step()
    capture = record(step)
    monkeypatch.setattr("dtrlab.capture.recorder.record", lambda *a, **k: capture)
    return step, capture


def _by_hand(step, capture, ratio: float, policy: str):
    """One session under the ratio of the plan's peak, following the capture."""
    budget = budget_from_ratio(to_program(capture), ratio)
    session = LiveSession(budget_bytes=budget, policy=policy, plan=capture.instructions)
    try:
        with session:
            step()
    except LiveBudgetError:
        return session, "oom"
    return session, "ok"


BIGGER = {name: ZOO[name].roomy for name in ZOO}  # room to evict: ZooModel.small


@pytest.mark.parametrize("name, ratio, policy, engine", [("lstm", 0.9, "dtr", "auto"), ("resnet32", 0.9, "lru", "auto"),
                                                    ("resnet32", 0.9, "dtr", "python")])
def test_run_json_figures_are_a_live_session_s(name, ratio, policy, engine, monkeypatch):
    step, capture = _prepared(name, monkeypatch, **BIGGER[name])
    code, out, _ = cli_invoke("run", name, *_sizes(name, **BIGGER[name]), "--ratio", ratio, "--policy", policy,
                              "--engine", engine, "--json")
    assert code in (0, None)
    got = json.loads(out)
    session, outcome = _by_hand(step, capture, ratio, policy)
    program = to_program(capture)
    assert (got["plan"], got["budget_bytes"]) == ("captured", budget_from_ratio(program, ratio))
    (live,) = got["steps"]
    assert live["engine"] == ("c" if engine == "auto" else engine) == got["engine"]
    assert live["outcome"] == outcome == "ok"
    assert live["evictions"] > 0  # the budget bites: the figures below are not an unbounded run's
    assert (live["peak_bytes"], live["evictions"], live["eager_evictions"], live["remats"],
            live["clock_ns"], live["remat_ns"]) == (session.peak_bytes, session.evictions, session.eager_evictions,
                                                    session.replays, session.clock_ns, session.remat_ns)
    assert live["overhead"] == session.clock_ns / (session.clock_ns - 1 - session.remat_ns)
    assert live["wall_s"] > 0 and got["plain_wall_s"] > 0
    assert live["wall_ratio"] == pytest.approx(live["wall_s"] / got["plain_wall_s"])


def test_run_table_and_steps(monkeypatch):
    """The text form prints the same figures, one column per step; a fresh session each step, so on
    the logical clock every step makes the same decisions."""
    step, capture = _prepared("lstm", monkeypatch, **BIGGER["lstm"])
    code, out, _ = cli_invoke("run", "lstm", *_sizes("lstm", **BIGGER["lstm"]), "--ratio", "0.9", "--steps", "2")
    assert code in (0, None)
    session, _ = _by_hand(step, capture, 0.9, "dtr")
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in out.splitlines() if line.startswith("│")}
    assert rows["outcome"] == ["ok", "ok"]
    assert rows["evictions (policy)"] == [f"{session.evictions:,}"] * 2
    assert rows["rematerializations"] == [f"{session.replays:,}"] * 2
    assert "live step 1" in out and "live step 2" in out and "plain PyTorch step:" in out


def test_threads_are_torch_s_for_the_whole_command_and_said(monkeypatch):
    """--threads sets torch's CPU threads before the plain steps are timed, and the JSON and the
    table say how many ran; on the logical clock the decisions do not depend on them."""
    before = torch.get_num_threads()
    step, capture = _prepared("lstm", monkeypatch, **BIGGER["lstm"])
    argv = ["run", "lstm", *_sizes("lstm", **BIGGER["lstm"]), "--ratio", "0.9"]
    seen = []
    monkeypatch.setattr("dtrlab.live.runs.plain_seconds",
                        lambda step, device: seen.append(torch.get_num_threads()) or 1.0)
    try:
        code, out, _ = cli_invoke(*argv, "--threads", "1", "--json")
        assert code in (0, None)
        got = json.loads(out)
        assert got["threads"] == seen[0] == 1
        session, _ = _by_hand(step, capture, 0.9, "dtr")
        assert (got["steps"][0]["evictions"], got["steps"][0]["remats"]) == (session.evictions, session.replays) != (0, 0)
        code, out, _ = cli_invoke(*argv, "--threads", "2")
        assert code in (0, None) and seen[-1] == 2 and "(2 CPU threads)" in out
    finally:
        torch.set_num_threads(before)


def test_compare_sim_is_simulate_on_the_plan_and_makes_the_same_decisions(monkeypatch):
    _, capture = _prepared("resnet32", monkeypatch, batch=8)
    argv = ["run", "resnet32", *_sizes("resnet32", batch=8), "--ratio", "0.8", "--policy", "dtr", "--compare-sim"]
    code, out, _ = cli_invoke(*argv, "--json")
    assert code in (0, None)
    got = json.loads(out)
    sim = got["simulated"]
    program = to_program(capture, "resnet32")
    want = simulate(program, budget_from_ratio(program, 0.8), "dtr", "eager-optimized")
    assert (sim["outcome"], sim["budget_bytes"], sim["peak_bytes"], sim["evictions"], sim["eager_evictions"],
            sim["clock_ns"], sim["remat_ns"], sim["runtime"]) == (
        want.outcome, want.budget_bytes, want.peak_bytes, want.evictions, want.eager_evictions,
        want.clock_ns, want.remat_ns, "eager-optimized")
    assert want.evictions > 0 and got["same_decisions"] == [True]
    (live,) = got["steps"]
    assert {k: live[k] for k in sim if k != "runtime"} == {k: v for k, v in sim.items() if k != "runtime"}

    code, out, _ = cli_invoke(*argv)
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    assert "live" in header and "simulated" in header
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in out.splitlines() if line.startswith("│")}
    assert rows["evictions (policy)"] == [f"{want.evictions:,}"] * 2
    assert "step 1: the same decisions as the simulation" in " ".join(out.split())


def test_a_plan_from_a_trace_file(tmp_path, monkeypatch):
    """--plan takes a trace file of the same step (here the capture, saved): the same figures as
    following the capture itself; a trace of another step is one line."""
    step, capture = _prepared("resnet32", monkeypatch, batch=8)
    path = tmp_path / "resnet.log.gz"
    save(capture, path)
    argv = ["run", "resnet32", *_sizes("resnet32", batch=8), "--ratio", "0.8", "--json", "--compare-sim"]
    code, out, _ = cli_invoke(*argv, "--plan", path)
    assert code in (0, None)
    got = json.loads(out)
    session, _ = _by_hand(step, capture, 0.8, "dtr")
    assert got["plan"] == str(path) and got["same_decisions"] == [True]
    assert got["steps"][0]["evictions"] == session.evictions > 0
    _, other = _prepared("lstm", monkeypatch)
    save(other, tmp_path / "lstm.log")
    code, out, err = cli_invoke(*argv, "--plan", tmp_path / "lstm.log")
    assert code == 2 and len(err.splitlines()) == 1 and "the step differs from its plan" in err


@pytest.mark.parametrize("argv, message", [
    (["run", "nosuch", "--ratio", "0.5"], "unknown model 'nosuch'"),
    (["run", "lstm", "--ratio", "0"], "ratio must be a positive number"),
    (["run", "lstm", "--ratio", "-1"], "ratio must be a positive number"),
    (["run", "lstm", "--ratio", "0.5", "--budget-bytes", "1000"], "exactly one of --ratio and --budget-bytes"),
    (["run", "lstm"], "exactly one of --ratio and --budget-bytes"),
    (["run", "lstm", "--ratio", "0.5", "--policy", "nosuch"], "nosuch"),
    (["run", "lstm", "--ratio", "0.5", "--clock", "wall"], "--clock must be logical or measured"),
    (["run", "lstm", "--ratio", "0.5", "--steps", "0"], "--steps must be at least 1"),
    (["run", "lstm", "--ratio", "0.5", "--threads", "0"], "--threads must be at least 1"),
    (["run", "--ratio", "0.5"], "exactly one of MODEL and --script"),
    (["run", "--script", "missing.py:f", "--ratio", "0.5"], "no such file"),
    (["run", "lstm", "--ratio", "0.5", "--trace", "x"], "--trace picks a trace of --plan's source"),
    (["run", "lstm", "--ratio", "0.5", "--plan", "missing.log"], "missing.log"),
])
def test_run_mistakes_are_one_line(argv, message):
    code, out, err = cli_invoke(*argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("dtrlab: ") and message in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_run_on_cuda_without_cuda_is_one_line():
    code, _, err = cli_invoke("run", "lstm", "--ratio", "0.5", "--device", "cuda")
    assert code == 2 and err == "dtrlab: CUDA is not available on this machine\n"


# A U-Net big enough that its activations, not its weights, make the peak (at 0.5 it runs on CPU).
CUDA_SIZES = ("batch=8", "image=128", "width=16", "depth=3")
ROUNDING_BYTES = 512  # the caching allocator rounds every block up to a multiple of 512 bytes
# Operators' own scratch (cuDNN's convolution workspace), taken from the allocator during a call and
# given back before it returns: the session never sees it.
WORKSPACE_BYTES = 16 << 20


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_budget_holds_in_the_cuda_allocator():
    """torch.cuda.max_memory_allocated() over the last live step (the command resets it before the
    step) is at most the budget plus the allocator's slack: what it held before the step that is no
    tensor of the step (cuBLAS's workspace), what the session admits above it (early_bytes: the
    results of an operator that also writes exist before room is made for them), 512 bytes of
    rounding for each block live at the peak, and the operators' transient workspaces."""
    argv = ["run", "unet", *(a for kv in CUDA_SIZES for a in ("--size", kv)), "--device", "cuda",
            "--ratio", "0.5", "--json"]
    code, out, _ = cli_invoke(*argv)
    assert code in (0, None)
    got = json.loads(out)
    (live,) = got["steps"]
    assert live["outcome"] == "ok", live["error"]
    blocks = torch.cuda.memory_stats()["active.all.peak"]
    slack = live["cuda_outside_bytes"] + live["early_bytes"] + ROUNDING_BYTES * blocks + WORKSPACE_BYTES
    assert live["peak_bytes"] <= got["budget_bytes"]  # the engine's count never passes it
    assert torch.cuda.max_memory_allocated() == live["cuda_peak_bytes"]
    assert live["cuda_peak_bytes"] <= got["budget_bytes"] + slack, (live, blocks)


@pytest.mark.slow
def test_the_readme_s_budget_example_is_below_the_step_s_peak():
    """The README's `dtrlab run lstm ... --budget-bytes B` example budgets below the step's peak (it
    was above: an unbounded run that evicts nothing)."""
    import shlex
    from pathlib import Path

    from dtrlab.capture.factory import make_step
    from dtrlab.sim.simulate import baseline

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("dtrlab run lstm") and "--budget-bytes" in x)
    argv = shlex.split(line.split("#")[0])
    sizes = [argv[k + 1] for k, a in enumerate(argv) if a == "--size"]
    budget = int(argv[argv.index("--budget-bytes") + 1])
    torch.manual_seed(0)
    step, label, _ = make_step("lstm", None, None, "cpu", sizes)
    step()
    peak = baseline(to_program(record(step), label)).peak_bytes
    assert budget < peak, (budget, peak)
