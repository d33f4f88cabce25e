"""The exit-2 contract of the diagnostics commands, through the console script's entry point: every
user mistake is one line `dtrlab: ...` on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import cli_invoke
from dtrlab.trace import shipped_traces

TINY = str(__import__("pathlib").Path(shipped_traces()).parent / "examples" / "tiny.jsonl")

# (command, arguments after SOURCE, a word the one line must contain)
MISTAKES = [
    (cmd, args, word)
    for cmd in ("compare", "diverge", "bisect")
    for args, word in (
        (["--between", "0.5", "0.5x"], "0.5x"),
        (["--between", "-3", "0.5"], "-3"),
        (["--between", "0.5", "0.6", "--policy", "no-such-policy"], "no-such-policy"),
        (["--between", "0.5", "0.6", "--runtime", "no-such-runtime"], "no-such-runtime"),
        (["--between", "0.5", "0.6", "--policy", "dtr", "--runtime", "lazy"], "lazy"),
        (["--between", "0.5", "0.6", "--trace", "nothing-by-this-name"], "nothing-by-this-name"),
    )
] + [
    ("ablate", ["--ratios", "0.5:0.4:0.1"], "0.5:0.4:0.1"),
    ("ablate", ["--ratios", "zero"], "zero"),
    ("ablate", ["--ratios", "0.5", "--runtime", "no-such-runtime"], "no-such-runtime"),
    ("ablate", ["--ratios", "0.5", "--trace", "nothing-by-this-name"], "nothing-by-this-name"),
    ("estar-drift", ["--ratio", "0.5", "--policy", "lru"], "lru"),
    ("estar-drift", ["--ratio", "0.5", "--runtime", "lazy"], "lazy"),
    ("estar-drift", ["--ratio", "0.5", "--budget-bytes", "100"], "--budget-bytes"),
    ("estar-drift", [], "--ratio"),
    ("estar-drift", ["--ratio", "-0.5"], "-0.5"),
    ("estar-drift", ["--ratio", "0.5", "--policy", "no-such-policy"], "no-such-policy"),
]


@pytest.mark.parametrize("cmd,args,word", MISTAKES, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_mistake_is_one_line_and_exit_2(cmd, args, word):
    code, _, err = cli_invoke(cmd, TINY, *args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dtrlab: "), err
    assert word in lines[0]


@pytest.mark.parametrize("cmd", ["compare", "diverge", "bisect", "ablate", "estar-drift", "scan", "explain-oom"])
def test_a_missing_source_names_it(cmd, tmp_path):
    missing = tmp_path / "no-such.log"
    args = {"compare": ["--between", "0.5", "0.6"], "diverge": ["--between", "0.5", "0.6"],
            "bisect": ["--between", "0.5", "0.6"], "ablate": ["--ratios", "0.5"],
            "scan": ["--ratios", "0.5", "--store", str(tmp_path / "s.duckdb")]}.get(cmd, ["--ratio", "0.5"])
    code, _, err = cli_invoke(cmd, missing, *args)
    assert code == 2 and err.strip() == f"dtrlab: {missing}: no such file or folder"
    assert not (tmp_path / "s.duckdb").exists()


def test_the_console_script_prints_no_traceback():
    # A real process (`python -m dtrlab.cli`): its exit status and streams as a shell sees them.
    proc = subprocess.run([sys.executable, "-m", "dtrlab.cli", "diverge", TINY, "--between", "0.5", "x"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("dtrlab: ") and "Traceback" not in proc.stderr
    assert proc.stdout == ""
