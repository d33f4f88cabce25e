"""The report package's shape: no import cycle between its modules, and the job's progress numbering."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

import dtrlab
from dtrlab.report.pipeline import STAGES, reproduce
from dtrlab.report.plan import QUICK

REPORT = Path(dtrlab.__file__).parent / "report"
TINY = Path(dtrlab.__file__).parent / "data" / "examples" / "tiny.jsonl"


def _report_imports(path: Path) -> set[str]:
    """The report modules a module imports, at the top or inside a function (a lazy import is still an edge)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from .x import y
                out.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import x, y
                out.update(a.name for a in node.names)
            elif node.module and node.module.startswith("dtrlab.report."):
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith("dtrlab.report."))
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph as a path of names (first == last), or None; iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state and nxt in graph:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_in_report():
    graph = {p.stem: _report_imports(p) for p in REPORT.glob("*.py")}
    assert graph["html"] >= {"tables"} and "write" not in graph["html"]  # the edge that used to close a cycle
    assert _cycle(graph) is None, _cycle(graph)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in REPORT.glob("*.py") if p.stem != "__init__"))
def test_each_report_module_imports_alone(name):
    # A fresh interpreter: alone means with nothing imported before it.
    proc = subprocess.run([sys.executable, "-c", f"import dtrlab.report.{name}"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_progress_counts_every_stage_and_ends_at_n_of_n(tmp_path):
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=False, color_system=None)
    reproduce(str(TINY), tmp_path / "out", plan=replace(QUICK, policies=("dtr",)), workers=1, console=console,
              progress=False)
    numbers = [(int(k), int(n)) for k, n in re.findall(r"^\W*(\d+)/(\d+) ", buffer.getvalue(), re.M)]
    n = len(STAGES)
    assert numbers == [(k, n) for k in range(1, n + 1)], buffer.getvalue()[-3000:]
