"""Plain conversion of command-line values, held against typer's own (pydantic) conversion.

One command with every kind of parameter dtrlab declares is run twice on the same arguments: as
typer builds it, and with `plain_coercions` applied. Both must give the same values, or both fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import typer
from typer.main import get_command

from dtrlab.coercion import plain_coercions


class Colour(str, Enum):
    red = "red"
    green = "green"


def _probe_app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.command()
    def probe(
        source: Optional[str] = typer.Argument(None),
        count: int = typer.Option(3, "--count"),
        ratio: Optional[float] = typer.Option(None, "--ratio"),
        size: Optional[int] = typer.Option(None, "--size"),
        name: str = typer.Option("dtr", "--name"),
        colour: Colour = typer.Option(Colour.red, "--colour"),
        tags: Optional[List[str]] = typer.Option(None, "--tag"),
        pair: Optional[Tuple[str, str]] = typer.Option(None, "--pair"),
        out: Optional[Path] = typer.Option(None, "--out"),
        flag: bool = typer.Option(False, "--flag"),
    ) -> None:
        typer.echo(json.dumps({"source": source, "count": count, "ratio": ratio, "size": size, "name": name,
                               "colour": [type(colour).__name__, colour.value],
                               "tags": None if tags is None else [type(tags).__name__, *tags],
                               "pair": None if pair is None else [type(pair).__name__, *pair],
                               "out": None if out is None else [type(out).__name__, str(out)], "flag": flag}))

    @app.command()
    def other() -> None:  # a second command, so the app is a group like dtrlab's
        pass

    return app


def _invoke(args: list[str], plain: bool) -> tuple[int, str]:
    command = get_command(_probe_app())
    if plain:
        plain_coercions(command)
    try:
        command.main(args=["probe", *args], prog_name="probe", standalone_mode=False)
    except typer.BadParameter:
        return 2, ""
    except Exception as exc:  # noqa: BLE001 - any other failure must be the same on both sides
        return 1, type(exc).__name__
    return 0, ""


CASES = [
    [],
    ["trace.log"],
    ["--count", "7", "--ratio", "0.25", "--size", "900000000"],
    ["--ratio", "1e-3", "--size", "-5"],
    ["--ratio", "inf"],
    ["--name", "msps", "--colour", "green"],
    ["--tag", "a", "--tag", "b"],
    ["--pair", "0.1", "0.2"],
    ["--out", "x/y.log.gz", "--flag"],
    ["--count", "seven"],
    ["--ratio", "half"],
    ["--size", "1.5"],
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) or "defaults" for c in CASES])
def test_plain_conversion_gives_what_typer_gives(args, capsys):
    typer_code = _invoke(args, plain=False)
    typer_out = capsys.readouterr().out
    plain_code = _invoke(args, plain=True)
    plain_out = capsys.readouterr().out
    assert plain_code == typer_code
    assert plain_out == typer_out


def test_every_dtrlab_parameter_gets_a_plain_converter():
    import dtrlab.cli

    command = get_command(dtrlab.cli.full_app())  # the root group applies plain_coercions as it is made
    missing = []

    def walk(cmd, path):
        ctx = cmd.context_class(cmd)
        for param in [*cmd.params, cmd.get_help_option(ctx)]:
            if param is not None and hasattr(param, "type_descriptor") and param._runtime_param is None:
                missing.append(f"{path} {param.name}")
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    if not hasattr(command.params[0], "_runtime_param"):
        pytest.skip("this typer converts values without pydantic")
    walk(command, "dtrlab")
    assert missing == []


def test_a_bad_value_is_one_line_from_the_console_script():
    # A real process: the console script's exit status and streams, as a shell sees them.
    proc = subprocess.run([sys.executable, "-c", "from dtrlab.cli import main; main()", "simulate",
                           "--ratio", "half"], capture_output=True, text=True)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("dtrlab: ") and "'--ratio'" in line and "'half' is not a number" in line, line
    assert proc.stdout == ""
