"""Mistakes in a user's step factory (`--script FILE.py:FUNCTION`), through `capture` and `run` alike:
each is one line naming the user's file and line, exit status 2; their own frames, never dtrlab's."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")

from conftest import cli_invoke  # noqa: E402

COMMANDS = {"capture": ["--out", "{tmp}/out.log"], "run": ["--ratio", "0.8", "--steps", "1"]}

LINEAR = ("import torch\n"
          "\n"
          "\n"
          "def make_step(batch=2):\n"             # line 4
          "    m = torch.nn.Linear(4, 4)\n"
          "    x = torch.randn(batch, 4)\n"
          "\n"
          "    def step():\n"                     # line 8
          "        m(x).sum().backward()\n")

# name: (the script, what the one line says after "FILE:"); a line is 1-based in the script.
CASES = {
    "no_return": (LINEAR,
                  "4: make_step returned None, not a step: a function that takes no arguments "
                  "(does it end with `return step`?)"),
    "not_callable": ("def make_step(batch=2):\n    return 42\n",
                     "1: make_step returned an int (42), not a step: a function that takes no arguments"),
    "needs_argument": ("def make_step(batch=2, *, hidden):\n    return lambda: None\n",
                       "1: make_step needs the argument 'hidden', which nothing gives: give --size hidden=VALUE, "
                       "or give it a default"),
    "step_takes_arguments": ("def make_step(batch=2):\n    def step(x):\n        pass\n    return step\n",
                             "2: the step make_step returned takes the argument x; a step takes none"),
    "syntax_error": ("import torch\n\ndef make_step(batch=2)\n    return None\n", "3: syntax error: expected ':'"),
    "script_raises": ("import torch\nimport no_such_module_here\n",
                      "2: the script raised ModuleNotFoundError: No module named 'no_such_module_here'"),
    "factory_raises": ("import torch\n\ndef make_step(batch=2):\n    return torch.nn.Linear(4, -1)\n",
                       "4: make_step raised RuntimeError: Trying to create tensor with negative dimension -1: "
                       "[-1, 4]"),
}

RAISING_STEP = ("import torch\n"
                "\n"
                "\n"
                "def helper(m, x):\n"
                "    return m(x) @ torch.randn(5, 5)\n"   # line 5: 4 columns against 5 rows
                "\n"
                "\n"
                "def make_step(batch=2):\n"
                "    m = torch.nn.Linear(4, 4)\n"
                "    x = torch.randn(batch, 4)\n"
                "\n"
                "    def step():\n"
                "        helper(m, x).sum().backward()\n"  # line 13
                "    return step\n")


def _argv(command: str, script, tmp_path, debug: bool = False) -> list[str]:
    extra = [a.format(tmp=tmp_path) for a in COMMANDS[command]]
    return [*(["--debug"] if debug else []), command, "--script", f"{script}:make_step", *extra]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_mistake_in_the_factory_is_one_line_at_its_file_and_line(case, command, tmp_path):
    text, said = CASES[case]
    script = tmp_path / "mine.py"
    script.write_text(text)
    code, out, err = cli_invoke(*_argv(command, script, tmp_path))
    assert code == 2
    assert err.splitlines()[-1] == f"dtrlab: {script}:{said}"
    assert "dtrlab/" not in err and "site-packages" not in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_step_that_raises_shows_the_users_frames_only(command, tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(RAISING_STEP)
    code, _, err = cli_invoke(*_argv(command, script, tmp_path))
    assert code == 2
    lines = err.splitlines()
    assert lines[-1] == (f"dtrlab: {script}:5: the step of make_step raised RuntimeError: mat1 and mat2 shapes "
                         "cannot be multiplied (2x4 and 5x5)")
    frames = [line.strip() for line in lines if line.strip().startswith("File ")]
    assert frames == [f'File "{script}", line 13, in step', f'File "{script}", line 5, in helper']


def test_debug_shows_every_frame(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(RAISING_STEP)
    code, _, err = cli_invoke(*_argv("capture", script, tmp_path, debug=True))
    assert code == 2
    assert err.splitlines()[-1].startswith(f"dtrlab: {script}:5: the step of make_step raised RuntimeError")
    files = {line.split('"')[1] for line in err.splitlines() if line.strip().startswith("File ")}
    assert str(script) in files
    assert any(f.endswith("dtrlab/capture/recorder.py") for f in files)  # dtrlab's frames too


def test_a_working_factory_still_runs(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(LINEAR + "    return step\n")
    code, _, err = cli_invoke(*_argv("capture", script, tmp_path))
    assert code == 0, err
