"""The command line: real traces in, tables and JSON out; user errors as one line and exit code 2."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import dtrlab.cli as cli
from conftest import REFERENCE, TRACES, needs_shared, parity_rows
from conftest import cli_invoke as run
from dtrlab.cli import full_app

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"


def one_line_error(result, *fragments):
    """The user-error contract: exit code 2, stderr one line `dtrlab: ...`, stdout empty."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dtrlab: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert result.stdout == ""
    return lines[0]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("DTRLAB_CACHE_DIR", str(folder))
    return folder


# --- trace info ----------------------------------------------------------------------------------


def test_trace_info_table_on_the_example():
    result = run("trace", "info", TINY)
    assert result.exit_code == 0, result.output
    assert "tiny (synthetic)" in result.stdout
    assert "operators (constants included)" in result.stdout
    assert "split_backward (line 33)" in result.stdout


def test_trace_info_json_on_the_example():
    result = run("trace", "info", TINY, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert isinstance(info, dict)
    required = {"name", "operators", "forward_operators", "backward_operators", "constants", "tensors",
                "storages", "aliases", "schedule_steps", "compute_ns", "constant_bytes", "largest_op_bytes"}
    assert required <= info.keys()
    assert (info["name"], info["operators"], info["constants"], info["synthetic"]) == ("tiny", 10, 2, True)
    assert info["forward_operators"] + info["backward_operators"] == info["operators"]
    assert info["instructions"]["CALL"] + info["instructions"]["MUTATE"] + info["constants"] == info["operators"]


@needs_shared
def test_trace_info_json_matches_the_reference_counts():
    reference = json.loads((REFERENCE / "lowering.json").read_text())
    result = run("trace", "info", TRACES, "--trace", "resnet", "--trace", "lstm", "--json", "--no-cache")
    assert result.exit_code == 0, result.output
    infos = json.loads(result.stdout)
    assert [i["name"] for i in infos] == ["resnet32", "lstm"]
    for info in infos:
        want = reference[info["name"]]
        assert {k: info[k] for k in want} == want
        assert info["synthetic"] is False


@needs_shared
def test_trace_info_table_for_several_traces():
    result = run("trace", "info", TRACES, "-t", "unet", "-t", "resnet")
    assert result.exit_code == 0, result.output
    assert "resnet32" in result.stdout and "unet" in result.stdout
    assert "2,532" in result.stdout  # unet's schedule steps


def test_no_cache_writes_nothing_and_the_default_caches(cache):
    assert run("trace", "info", TINY, "--no-cache").exit_code == 0
    assert not cache.exists()
    assert run("trace", "info", TINY).exit_code == 0
    assert len(list((cache / "programs").glob("*.npz"))) == 1


def test_strict_turns_an_unknown_release_into_an_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(TINY.read_text() + '{"INSTRUCTION":"RELEASE","NAME":"ghost"}\n')
    assert run("trace", "info", path).exit_code == 0
    line = one_line_error(run("trace", "info", path, "--strict"), "RELEASE of undefined tensor 'ghost'")
    assert line == f"dtrlab: {path}:58: RELEASE of undefined tensor 'ghost'"


# --- simulate ------------------------------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("engine", ["auto", "python"])
def test_simulate_json_matches_a_reference_row(engine):
    row = next(r for r in parity_rows() if r["trace"] == "resnet32" and r["heuristic"] == "DTR"
               and r["runtime"] == "RuntimeV2EagerOptimized" and r["ratio"] == 0.5)
    result = run("simulate", TRACES, "--trace", "resnet32", "--ratio", "0.5", "--engine", engine, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert list(out) == ["outcome", "overhead", "clock_ns", "baseline_compute_ns", "baseline_peak_bytes",
                         "budget_bytes", "ratio", "evictions", "eager_evictions", "distinct_evicted",
                         "peak_bytes", "remat_ns", "score_evals", "policy", "runtime", "engine", "trace",
                         "engine_note"]
    assert (out["outcome"], out["clock_ns"], out["budget_bytes"], out["evictions"]) == \
           (row["outcome"], row["clock"], row["budget"], row["evictions_heuristic"])
    assert (out["baseline_peak_bytes"], out["baseline_compute_ns"]) == (row["baseline_memory"], row["baseline_compute"])
    assert out["overhead"] == pytest.approx(row["overhead"], rel=1e-12)
    assert (out["ratio"], out["policy"], out["runtime"], out["trace"]) == (0.5, "dtr", "eager-optimized", "resnet32")
    if engine == "python":
        assert out["engine"] == "python"
    assert out["engine_note"] is None  # the engine asked for (auto: the compiled one) ran


def test_simulate_says_why_the_python_engine_ran():
    out = json.loads(run("simulate", TINY, "--ratio", "0.7", "--runtime", "banishing", "--policy", "lru",
                         "--json").stdout)
    assert out["engine"] == "python" and "banishing runtime runs on the Python engine only" in out["engine_note"]
    table = run("simulate", TINY, "--ratio", "0.7", "--runtime", "banishing", "--policy", "lru").stdout
    assert "(python engine)" in table and "python: the banishing runtime runs on the Python engine only" in table
    one_line_error(run("simulate", TINY, "--ratio", "0.7", "--runtime", "banishing", "--policy", "lru",
                       "--engine", "c"), "compiled engine is not available", "banishing runtime")


def test_simulate_with_bytes_and_reference_names():
    result = run("simulate", TINY, "--budget-bytes", 4_000_000, "--policy", "LRU", "--runtime",
                 "RuntimeV2Eager", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["budget_bytes"], out["ratio"], out["policy"], out["runtime"]) == (4_000_000, None, "lru", "eager")
    assert out["peak_bytes"] <= 4_000_000 or out["outcome"] != "ok"


def test_simulate_table():
    result = run("simulate", TINY, "--ratio", "0.7")
    assert result.exit_code == 0, result.output
    assert "tiny (synthetic): dtr / eager-optimized" in result.stdout
    assert "ratio 0.7" in result.stdout and "evictions (policy)" in result.stdout


def test_simulate_overhead_limit_stops_the_run():
    free = json.loads(run("simulate", TINY, "--ratio", "0.7", "--json").stdout)
    assert free["overhead"] > 1.2
    limited = json.loads(run("simulate", TINY, "--ratio", "0.7", "--overhead-limit", "1.2", "--json").stdout)
    assert limited["outcome"] == "remat_limit"


@pytest.mark.parametrize("args, fragment", [
    (["--ratio", "0.5", "--policy", "nope"], "unknown policy 'nope'"),
    (["--ratio", "0.5", "--runtime", "nope"], "unknown runtime 'nope'"),
    (["--ratio", "0"], "ratio must be a positive number"),
    (["--ratio", "-1"], "ratio must be a positive number"),
    (["--ratio", "nan"], "ratio must be a positive number"),
    (["--ratio", "0.5", "--budget-bytes", "100"], "give exactly one of --ratio and --budget-bytes"),
    ([], "give exactly one of --ratio and --budget-bytes"),
    (["--budget-bytes", "-1"], "--budget-bytes must be a non-negative number of bytes"),
    (["--ratio", "0.5", "--overhead-limit", "0.5"], "overhead limit must be at least 1"),
    (["--ratio", "0.5", "--trace", "nothing"], "no trace matches 'nothing'"),
])
def test_simulate_bad_arguments(args, fragment):
    one_line_error(run("simulate", TINY, *args), fragment)


def test_simulate_missing_file(tmp_path):
    one_line_error(run("simulate", tmp_path / "nope.log", "--ratio", "0.5"), "nope.log: no such file or folder")


@needs_shared
def test_simulate_needs_one_trace():
    one_line_error(run("simulate", TRACES, "--ratio", "0.5"), "pick one trace with --trace")
    one_line_error(run("simulate", TRACES, "--ratio", "0.5", "--trace", "t"),  # tv_densenet121, transformer
                   "traces: tv_densenet121, transformer")


def test_a_bad_trace_names_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = TINY.read_text().splitlines()
    lines[9] = '{"INSTRUCTION":"MEMORY","NAME":"w3","MEMORY":"-8"}'
    path.write_text("\n".join(lines) + "\n")
    for args in (["trace", "info", path], ["simulate", path, "--ratio", "0.5"]):
        line = one_line_error(run(*args))
        assert line == f"dtrlab: {path}:10: field MEMORY is negative: -8"


# --- policies --------------------------------------------------------------------------------------


def test_policies_lists_names_reference_aliases_and_descriptions():
    result = run("policies", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["dtr"]["reference"] == "DTR" and "e*" in rows["dtr"]["description"]
    assert rows["size"]["reference"] == "LargestStorage"
    assert len(rows) >= 24  # eight policies and sixteen ablations
    table = run("policies")
    assert "LargestStorage" in table.stdout and "dtr-eq" in table.stdout


# --- main(): the console script's contract -------------------------------------------------------------


def test_main_turns_click_usage_errors_into_one_line():
    for argv, fragment in ((["simulate", str(TINY), "--ratio", "abc"], "--ratio"),
                           (["simulate", str(TINY), "--bogus"], "No such option: --bogus"),
                           (["nope"], "No such command")):
        code, _, err = run(*argv)
        assert code == 2
        err = err.splitlines()
        assert len(err) == 1 and err[0].startswith("dtrlab: ") and fragment in err[0]


def test_main_user_error_and_success(tmp_path):
    code, _, err = run("trace", "info", tmp_path / "missing.log")
    assert code == 2
    assert err == f"dtrlab: {tmp_path / 'missing.log'}: no such file or folder\n"
    code, out, _ = run("trace", "info", TINY, "--json")
    assert code == 0
    assert json.loads(out)["name"] == "tiny"
    code, out, _ = run()
    assert code == 0 and "simulate" in out


def test_a_bug_keeps_its_traceback(monkeypatch):
    import dtrlab.trace.stats as stats

    def broken(program):
        raise RuntimeError("a bug in dtrlab")

    monkeypatch.setattr(stats, "trace_stats", broken)
    result = run("trace", "info", TINY)  # through main, which lets a bug through with its traceback
    assert isinstance(result.exception, RuntimeError) and result.exit_code == 1
    assert str(result.exception) == "a bug in dtrlab" and result.stderr == ""


def test_console_script_prints_one_line_for_a_bad_trace(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"INSTRUCTION":"CONSTANT","NAME":"a"}\n{"INSTRUCTION":"MEMORY","NAME":"a"}\n')
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "DTRLAB_CACHE_DIR": str(tmp_path / "cache")}
    # A real process: the exit status and the streams a fresh interpreter leaves, as a shell sees them.
    proc = subprocess.run([sys.executable, "-c", "from dtrlab.cli import main; main()", "trace", "info", str(path)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"dtrlab: {path}:2: MEMORY is missing field MEMORY\n"


# --- other modules' commands ---------------------------------------------------------------------------


def test_extension_modules_register_their_commands(tmp_path, monkeypatch):
    (tmp_path / "dtrlab_ext_ok.py").write_text(textwrap.dedent("""
        def register(app):
            @app.command("hello")
            def hello():
                print("hello from an extension")
    """))
    (tmp_path / "dtrlab_ext_broken.py").write_text("import dtrlab_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    target = typer.Typer()

    @target.command()
    def other():  # two commands make a group, as in the real app
        pass

    cli._register_extensions(target, ("dtrlab_ext_ok", "dtrlab_ext_absent", "dtrlab_ext_absent.sub"))
    result = CliRunner().invoke(target, ["hello"])  # an app of the test's own, not dtrlab's: no cli_invoke
    assert result.exit_code == 0 and "hello from an extension" in result.stdout
    # a module that exists but misses a dependency is a bug, not an absent extension
    with pytest.raises(ModuleNotFoundError) as info:
        cli._register_extensions(target, ("dtrlab_ext_broken",))
    assert info.value.name == "dtrlab_no_such_dependency"


def test_source_defaults_to_the_shipped_traces():
    """With no SOURCE, every command reads the traces that ship inside dtrlab."""
    from dtrlab.trace import load, shipped_traces

    names = {p.name for p in load(shipped_traces())}
    assert {"resnet32", "lstm"} <= names
    res = run("simulate", "--trace", "resnet32", "--ratio", "0.5", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["trace"] == "resnet32" and out["outcome"] in ("ok", "oom")
    res = run("trace", "info", "--json")
    assert res.exit_code == 0 and {t["name"] for t in json.loads(res.output)} == names


# --- start-up and pipes --------------------------------------------------------------------------

HEAVY = ("duckdb", "numpy", "pandas", "matplotlib", "dask", "pyarrow", "jinja2", "torch")


def _modules_after(code: str, *argv: str, tmp_path: Path) -> set[str]:
    """The top-level modules a fresh interpreter holds after running `code` with argv (a process of its
    own: this one has imported everything already)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "DTRLAB_CACHE_DIR": str(tmp_path / "cache")}
    wrapped = (f"try:\n    {code}\nexcept SystemExit:\n    pass\n"
               "import sys, json\nprint('MODULES=' + json.dumps(sorted(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", wrapped, *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES="))
    return set(json.loads(line.removeprefix("MODULES=")))


def test_importing_the_cli_loads_no_heavy_library(tmp_path):
    loaded = _modules_after("import dtrlab.cli", tmp_path=tmp_path)
    assert "dtrlab.cli" in loaded
    assert sorted(m for m in (*HEAVY, *cli.EXTENSIONS) if m in loaded) == []  # a command's module: when run


def test_the_extensions_table_names_what_each_module_registers():
    for module, names in cli.EXTENSIONS.items():
        target = typer.Typer()
        importlib.import_module(module).register(target)
        assert sorted(cli._name(i) for i in [*target.registered_commands, *target.registered_groups]) \
            == sorted(names), module


@pytest.mark.parametrize("args, names", [
    (["simulate", "--ratio", "0.5"], ["simulate"]),
    (["--debug", "sweep", "--help"], ["sweep"]),
    (["schedule", "check", "--help"], ["schedule"]),
    (["trace", "info"], ["trace"]),
    (["--help", "simulate"], None),  # root help: every command
    (["--version"], None),
    (["simulat"], None),  # misspelt: click's own message, with every name to suggest from
])
def test_a_run_builds_only_the_command_it_names(args, names):
    every = sorted(cli._name(i) for a in [cli.full_app()] for i in [*a.registered_commands, *a.registered_groups])
    made = cli._app_for(args)
    got = sorted(cli._name(i) for i in [*made.registered_commands, *made.registered_groups])
    assert got == (every if names is None else names)


def test_a_misspelt_command_is_one_line_naming_the_nearest():
    result = run("simulat")
    assert result.exit_code == 2 and "No such command 'simulat'" in result.stderr


def test_help_loads_neither_numpy_nor_rich_help_nor_pydantic(tmp_path):
    loaded = _modules_after("from dtrlab.cli import main; main()", "--help", tmp_path=tmp_path)
    assert sorted(m for m in (*HEAVY, "typer.rich_utils", "rich.markdown", "pydantic") if m in loaded) == []


@pytest.mark.slow
def test_a_cached_simulate_loads_what_it_needs_and_no_more(tmp_path):
    # numpy (the program and the engine) yes; the store, the report and pydantic no.
    code = "from dtrlab.cli import main; main()"
    argv = ("simulate", str(TINY), "--ratio", "0.5", "--json")
    _modules_after(code, *argv, tmp_path=tmp_path)  # fills the cache
    loaded = _modules_after(code, *argv, tmp_path=tmp_path)
    assert "numpy" in loaded and "dtrlab.sim.simulate" in loaded
    assert sorted(m for m in ("duckdb", "pandas", "matplotlib", "dask", "pydantic", "dtrlab.sweep.store")
                  if m in loaded) == []


def test_a_table_written_to_a_pipe_keeps_every_name_whole():
    # CliRunner's stdout is not a terminal: five shipped traces side by side pass 80 columns.
    from dtrlab.trace import load, shipped_traces

    names = [p.name for p in load(shipped_traces())]
    result = run("trace", "info")
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines() if "resnet32" in line)
    assert len(header) > 80
    for name in names:
        assert name in header
    assert "…" not in result.stdout


def test_debug_prints_an_errors_details_after_its_traceback(capsys):
    # `dtrlab --debug` is the one switch for more: a live step's difference from its plan keeps its
    # full form in `details`, which only --debug prints
    from dtrlab.cli import _show_cause
    from dtrlab.live.mismatch import PlanMismatch

    exc = PlanMismatch("the step differs from its plan", "instruction 7: the plan's call in full")
    _show_cause(exc, debug=False)
    assert "instruction 7" not in capsys.readouterr().err
    _show_cause(exc, debug=True)
    assert capsys.readouterr().err.rstrip().endswith("instruction 7: the plan's call in full")


def _command_names(group: typer.Typer, prefix: str = "") -> list[str]:
    """Every command the program has, subcommands of its groups as 'GROUP NAME'."""
    cmd = typer.main.get_command(group)
    out: list[str] = []

    def walk(c, path: str) -> None:
        subs = getattr(c, "commands", None)
        if subs is None:
            out.append(path)
            return
        for name, sub in subs.items():
            walk(sub, f"{path} {name}".strip())
    walk(cmd, prefix)
    return out


def test_every_command_is_documented():
    """Each command a user can type is shown as `dtrlab COMMAND` in docs/ or the README (a new
    command without its page fails here; `run` once had none)."""
    root = Path(__file__).resolve().parents[1]
    text = " ".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    text = " ".join(text.split())
    missing = [name for name in _command_names(full_app()) if f"dtrlab {name}" not in text]
    assert len(_command_names(full_app())) > 20 and not missing, missing


def test_the_docs_speak_to_a_reader_without_the_tracker():
    """docs/ and the README say what they mean, never 'the issue' (a reader has no tracker)."""
    root = Path(__file__).resolve().parents[1]
    found = [f"{p.name}:{k}" for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
             for k, line in enumerate(p.read_text().splitlines(), 1) if "the issue" in line.lower()]
    assert not found, found
