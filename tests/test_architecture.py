"""The import-linter layers contract in pyproject.toml: kept by the real tree, broken by a
copy of the tree where a library module imports the CLI (so the check can fail)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is not installed (pip install 'import-linter>=2.0')")

ROOT = Path(__file__).resolve().parents[1]


def _lint(src: Path, config: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(src))
    code = "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run([sys.executable, "-c", code, "--config", str(config), "--no-cache"],
                          cwd=src.parent, env=env, capture_output=True, text=True, timeout=300)


def test_the_real_tree_keeps_the_layers_contract():
    done = _lint(ROOT / "src", ROOT / "pyproject.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_a_library_module_importing_the_cli_breaks_the_contract(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "dtrlab", src / "dtrlab",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    result = src / "dtrlab" / "sim" / "result.py"
    result.write_text(result.read_text() + "\nimport dtrlab.cli  # noqa: E402,F401 - the wrong way\n")
    done = _lint(src, tmp_path / "pyproject.toml")
    assert done.returncode != 0, done.stdout
    assert "dtrlab.sim.result -> dtrlab.cli" in done.stdout
