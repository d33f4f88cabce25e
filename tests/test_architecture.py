"""The import-linter layers contract in pyproject.toml: kept by the real tree, broken by a
copy of the tree where a library module imports the CLI, or a lower layer a higher one (so the
check can fail)."""

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


@pytest.mark.parametrize("module, wrong", [
    ("sim/result.py", "dtrlab.cli"),        # a library module importing the CLI
    ("trace/lower.py", "dtrlab.analysis"),  # a lower layer importing a higher one
])
def test_a_wrong_way_import_breaks_the_contract(tmp_path, module, wrong):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "dtrlab", src / "dtrlab",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = src / "dtrlab" / module
    path.write_text(path.read_text() + f"\nimport {wrong}  # noqa: E402,F401 - the wrong way\n")
    done = _lint(src, tmp_path / "pyproject.toml")
    assert done.returncode != 0, done.stdout
    importer = "dtrlab." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {wrong}" in done.stdout
