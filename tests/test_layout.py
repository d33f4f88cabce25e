"""Library code lives in the library: every command lives in the dtrlab.cli package, and no module
outside it imports it, so a command stays a thin layer over functions any program can call."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "dtrlab"


def _is_command_module(path: Path) -> bool:
    return path.relative_to(SRC).parts[0] == "cli"


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports (relative imports resolved), at any depth of its code."""
    package = ["dtrlab", *path.relative_to(SRC).parent.parts]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def wrong_way_imports() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if _is_command_module(path):
            continue
        for module in imported_modules(path):
            if module == "dtrlab.cli" or module.startswith("dtrlab.cli.") or module.endswith(".commands"):
                bad.append(f"{path.relative_to(SRC)} imports {module}")
    return bad


def test_no_library_module_imports_a_command_module():
    assert wrong_way_imports() == []
    assert not list(SRC.rglob("commands.py")), "a command module outside dtrlab.cli"


def test_the_check_sees_a_wrong_way_import(tmp_path, monkeypatch):
    """A library module that imports a command module (relatively, inside a function) is found."""
    lib = tmp_path / "dtrlab" / "report"
    lib.mkdir(parents=True)
    (lib / "timelines.py").write_text("def f():\n    from ..cli.timeline import write\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path / "dtrlab")
    assert sorted(wrong_way_imports()) == ["report/timelines.py imports dtrlab.cli.timeline",
                                           "report/timelines.py imports dtrlab.cli.timeline.write"]
