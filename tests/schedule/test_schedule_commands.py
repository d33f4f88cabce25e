"""`dtrlab simulate --schedule-out` and `dtrlab schedule check` on real traces: the file written is
the run's schedule, the check prints the run's own figures; every mistake is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TRACES, needs_shared, public_program
from conftest import cli_invoke as run
from dtrlab.schedule import read_schedule, write_schedule
from dtrlab.schedule.emit import simulate_schedule
from dtrlab.sim.simulate import budget_from_ratio
from dtrlab.trace import load

TINY = Path(__file__).resolve().parents[2] / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"


def one_line_error(result, *fragments) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtrlab: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


def _tiny():
    (program,) = load(TINY, cache=False)
    return program


@pytest.mark.parametrize("engine", ["python", "c", "auto"])
def test_simulate_writes_the_runs_schedule_and_check_prints_its_figures(tmp_path, engine):
    from conftest import have_compiled

    if engine == "c" and not have_compiled():
        pytest.skip("the compiled engine is not built")
    out = tmp_path / "s.jsonl"
    sim = run("simulate", TINY, "--ratio", "0.6", "--engine", engine, "--schedule-out", out, "--json")
    assert sim.exit_code == 0, sim.output
    figures = json.loads(sim.stdout)
    program = _tiny()
    _, expected = simulate_schedule(program, figures["budget_bytes"], engine="python")
    written = read_schedule(out)
    assert written.equals(expected) and len(written) > program.n_ops  # it recomputes or frees
    head = json.loads(out.read_text().splitlines()[0])
    assert (head["trace"], head["policy"], head["runtime"], head["outcome"]) == ("tiny", "dtr", "eager-optimized", "ok")
    check = run("schedule", "check", TINY, out, "--ratio", "0.6", "--json")
    assert check.exit_code == 0, check.output
    replay = json.loads(check.stdout)
    assert replay["valid"] and replay["budget_from"] == "--ratio"
    for key in ("clock_ns", "peak_bytes", "overhead", "remat_ns", "budget_bytes"):
        assert replay[key] == figures[key], key
    assert replay["n_free"] == figures["evictions"] + figures["eager_evictions"]
    table = run("schedule", "check", TINY, out)  # the budget of the header
    assert table.exit_code == 0 and "the schedule's header" in table.stdout and f"{figures['peak_bytes']:,}" in table.stdout


def test_a_schedule_the_trace_rejects_names_the_file_line_and_event(tmp_path):
    out = tmp_path / "s.jsonl"
    assert run("simulate", TINY, "--ratio", "0.6", "--schedule-out", out).exit_code == 0
    sched = read_schedule(out)
    budget = int(json.loads(run("schedule", "check", TINY, out, "--json").stdout)["peak_bytes"]) - 1
    line = one_line_error(run("schedule", "check", TINY, out, "--budget-bytes", budget), "crosses the budget")
    event = int(line.split(": event ")[1].split(":")[0])
    assert line.startswith(f"dtrlab: {out}:{event + 2}: event {event}: ")  # the header is line 1
    # the last event removed: an output (or an operator) is missing at the end
    lines = out.read_text().splitlines()
    head = json.loads(lines[0])
    head["events"] = len(sched) - 1
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join([json.dumps(head)] + lines[1:-1]) + "\n")
    one_line_error(run("schedule", "check", TINY, short), f"{short}:{len(lines) - 1}: end (after {len(sched) - 1} events)")


def test_an_out_of_memory_runs_schedule_is_written_and_refused_at_its_end(tmp_path):
    out = tmp_path / "oom.jsonl"
    sim = run("simulate", TINY, "--ratio", "0.05", "--schedule-out", out, "--json")
    assert sim.exit_code == 0 and json.loads(sim.stdout)["outcome"] == "oom"
    assert json.loads(out.read_text().splitlines()[0])["outcome"] == "oom"
    one_line_error(run("schedule", "check", TINY, out), "end (after", "ends before the first computation")


@needs_shared
def test_another_traces_schedule_and_the_resnet_window(tmp_path):
    """ResNet-32's run at 0.101 fits every budget of DTR's out-of-memory window 0.102-0.106 (a
    schedule that fits a budget fits every larger one); the U-Net refuses it by its sha256."""
    resnet = next(TRACES.glob("resnet32-*.log"))
    out = tmp_path / "r.jsonl"
    assert run("simulate", resnet, "--ratio", "0.101", "--schedule-out", out).exit_code == 0
    for ratio in ("0.102", "0.104", "0.106"):
        check = run("schedule", "check", resnet, out, "--ratio", ratio, "--json")
        assert check.exit_code == 0 and json.loads(check.stdout)["budget_bytes"] == budget_from_ratio(
            public_program("resnet32"), ratio)
    one_line_error(run("schedule", "check", TRACES, out, "--trace", "unet"), f"{out}:1: header: the schedule is for another trace")
    # among a folder's traces, the one the schedule is for is found by its sha256
    found = run("schedule", "check", TRACES, out, "--json")
    assert found.exit_code == 0 and json.loads(found.stdout)["trace"] == "resnet32"
    other = tmp_path / "other.jsonl"
    write_schedule(simulate_schedule(_tiny(), None)[1], other)
    one_line_error(run("schedule", "check", TRACES, other), "none of its 6 traces has the schedule's sha256")


@pytest.mark.parametrize("args, fragment", [
    (["--ratio", "0.5", "--budget-bytes", "100"], "give at most one of --ratio and --budget-bytes"),
    (["--budget-bytes", "-1"], "--budget-bytes must be a non-negative number of bytes"),
    (["--ratio", "0"], "ratio must be a positive number"),
])
def test_check_bad_arguments(tmp_path, args, fragment):
    out = tmp_path / "s.jsonl"
    program = _tiny()
    write_schedule(simulate_schedule(program, None)[1], out)
    one_line_error(run("schedule", "check", TINY, out, *args), fragment)


def test_a_bad_schedule_file_is_one_line_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "dtrlab-schedule", "version": 1, "trace_sha256": "' + "0" * 64
                   + '", "made_by": "x"}\n{"compute": 0}\n{"recompute": 1}\n')
    one_line_error(run("schedule", "check", TINY, bad), f"{bad}:3: unknown event 'recompute'")
    one_line_error(run("schedule", "check", TINY, tmp_path / "none.jsonl"), "cannot read the schedule")
    one_line_error(run("simulate", TINY, "--ratio", "0.5", "--schedule-out", tmp_path / "no" / "s.jsonl"),
                   "cannot write the schedule")


def test_bare_schedule_prints_help():
    result = run("schedule")
    assert result.exit_code == 0 and "check" in result.stdout
