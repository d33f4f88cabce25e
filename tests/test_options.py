"""One option vocabulary: a flag means the same thing in every command that takes it, every command
that runs DTR simulations takes --seed and --engine, and docs/cli.md's table of shared options is
what the CLI has."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import typer.main

from dtrlab import cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
# Commands that run DTR simulations; each takes --seed and --engine.
SIMULATING = ("simulate", "sweep", "scan", "rank", "ablate", "bisect", "compare", "diverge", "explain-oom",
              "timeline", "run")
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

    walk(typer.main.get_command(cli.app), "")
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
