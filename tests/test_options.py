"""One option vocabulary: a flag means the same thing in every command that takes it, every command
that runs DTR simulations takes --seed and --engine, and docs/cli.md's table of shared options is
what the CLI has."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import typer.main

from dtrlab import cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
# Commands that run DTR simulations; each takes --seed and --engine.
SIMULATING = ("simulate", "sweep", "scan", "rank", "ablate", "bisect", "compare", "diverge", "explain-oom",
              "timeline", "run", "reproduce")
# estar-drift reads the Python engine's own e* regions at every score: it takes --seed, not --engine.
PYTHON_ENGINE_ONLY = ("estar-drift",)


def commands() -> dict[str, list]:
    """Command path -> its click options."""
    out: dict[str, list] = {}

    def walk(command, path: str) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}".strip())
        else:
            out[path] = [p for p in command.params if getattr(p, "param_type_name", "") == "option"]

    walk(typer.main.get_command(cli.full_app()), "")
    return {k: v for k, v in out.items() if k}


def _names(option) -> tuple[set[str], set[str]]:
    names = set(option.opts) | set(option.secondary_opts)
    return {n for n in names if n.startswith("--")}, {n for n in names if not n.startswith("--")}


def shared_options_table() -> str:
    """The markdown table of the options two or more commands take (docs/cli.md holds it)."""
    takers: dict[str, set[str]] = defaultdict(set)
    spelled: dict[str, str] = {}
    for command, options in commands().items():
        for option in options:
            longs, shorts = _names(option)
            key = option.opts[0]
            takers[key].add(command)
            spelled[key] = ", ".join(f"`{n}`" for n in [*option.opts, *option.secondary_opts])
    rows = ["| option | commands |", "|---|---|"]
    for key in sorted(takers, key=lambda k: (k.lstrip("-").lower())):
        if len(takers[key]) >= 2:
            rows.append(f"| {spelled[key]} | {', '.join(sorted(takers[key]))} |")
    return "\n".join(rows)


def test_a_short_flag_means_one_thing_and_a_long_option_has_one_short_flag():
    shorts_of: dict[str, set[frozenset]] = defaultdict(set)
    longs_of: dict[str, list[set[str]]] = defaultdict(list)
    for command, options in commands().items():
        for option in options:
            longs, shorts = _names(option)
            for name in longs:
                shorts_of[name].add(frozenset(shorts))
            for short in shorts:
                longs_of[short].append(longs)
    assert {n: s for n, s in shorts_of.items() if len(s) > 1} == {}
    for short, families in longs_of.items():
        common = set.intersection(*families)
        assert common, f"{short} names unrelated options: {families}"


def test_every_simulating_command_takes_seed_and_engine():
    table = commands()
    for command in SIMULATING:
        names = {n for option in table[command] for n in _names(option)[0]}
        assert {"--seed", "--engine"} <= names, command
    for command in PYTHON_ENGINE_ONLY:
        names = {n for option in table[command] for n in _names(option)[0]}
        assert "--seed" in names and "--engine" not in names, command


def test_the_docs_table_of_shared_options_is_the_cli_s():
    assert shared_options_table() in DOC.read_text(), (
        "docs/cli.md's table of shared options differs from the CLI; the table is:\n" + shared_options_table())


# Commands that print no result to read back: they write a file or change a store or a set.
NO_JSON = {"results export": "writes a parquet or csv file", "results salvage": "writes a new store",
           "traces add": "stores a trace set", "traces fetch": "downloads a trace set",
           "traces remove": "removes a trace set"}


def test_every_command_that_prints_a_result_takes_json():
    table = commands()
    lacking = {c for c, options in table.items() if "--json" not in {n for o in options for n in _names(o)[0]}}
    assert lacking == set(NO_JSON)


TINY = Path(__file__).resolve().parents[1] / "src" / "dtrlab" / "data" / "examples" / "tiny.jsonl"


def test_sweep_json_is_the_summary_and_a_rerun_skips_every_run(tmp_path):
    import json

    from conftest import cli_invoke

    args = ("sweep", TINY, "-r", "0.5,0.7,0.9", "--store", tmp_path / "s.duckdb", "-j", "1", "--json")
    first = cli_invoke(*args)
    assert first.exit_code == 0, first.output
    got = json.loads(first.output)
    assert (got["total"], got["ran"], got["skipped"], got["missing"]) == (3, 3, 0, 0)
    (row,) = got["rows"]
    assert row["ok"] + row["oom"] + row["remat_limit"] + row["timeout"] == 3
    again = json.loads(cli_invoke(*args).output)
    assert (again["total"], again["ran"], again["skipped"]) == (3, 0, 3)


@pytest.mark.slow
def test_reproduce_json_gives_the_claims_and_the_report(tmp_path):
    import json

    from conftest import cli_invoke

    res = cli_invoke("reproduce", TINY, "--quick", "--out", tmp_path / "r", "-j", "1", "--json")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout if hasattr(res, "stdout") else res.output)
    assert Path(got["report"]).is_file() and got["new_runs"] == got["runs"] > 0
    assert {c["key"] for c in got["claims"]} >= {"a1", "a2", "a3", "b1", "b2", "c", "d"}


@pytest.mark.slow
def test_reproduce_seed_and_engine_reach_every_run_it_sweeps(tmp_path):
    """--seed decides the drawing policies' runs (the random one here) and is stored with every run;
    --engine python runs every sweep on the Python engine."""
    from conftest import cli_invoke

    from dtrlab.report.pipeline import STORE_NAME
    from dtrlab.sweep.store import Store

    stored = {}
    for seed in (1, 2):
        out = tmp_path / f"seed{seed}"
        res = cli_invoke("reproduce", TINY, "--quick", "--out", out, "-j", "1", "-p", "random",
                         "--seed", str(seed), "--engine", "python", "--json")
        assert res.exit_code == 0, res.output
        store = Store(out / STORE_NAME)
        try:
            rows = store.rows()
        finally:
            store.close()
        assert set(rows["seed"]) == {seed}
        assert set(rows["engine"].dropna()) == {"python"}
        random = rows[rows["policy"] == "random"].sort_values("budget_bytes")
        assert len(random) > 0
        stored[seed] = random[["budget_bytes", "outcome", "evictions"]].to_records(index=False).tolist()
    assert stored[1] != stored[2]  # the random policy drew differently
