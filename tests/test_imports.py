"""hoplib's modules as a reader finds them: each imports on its own, no two share a file name, and the imports
between them (those inside functions too) form no circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOPLIB = ROOT / "hoplib"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(HOPLIB.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """``{module: the hoplib modules it imports}``, at the top or inside a function: ``from a.b import c`` is an
    import of ``a.b.c`` where that is a module, else of ``a.b``."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle a depth-first search meets (empty: the graph has none)."""
    state: dict[str, int] = {}
    path: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_circle_through_an_import_inside_a_function():
    # the circle that was: evaluate -> report (METRICS) -> train (RunConfig, inside a method) -> evaluate
    assert cycles({"evaluate": {"report"}, "report": {"train"}, "train": {"evaluate"}}) == [
        ["evaluate", "report", "train", "evaluate"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_among_hoplibs_modules():
    graph = import_graph()
    assert "hoplib.train" in graph["hoplib.grids"]  # the graph sees the imports
    assert not cycles(graph), cycles(graph)


def test_no_two_modules_share_a_file_name():
    names = Counter(p.name for p in HOPLIB.rglob("*.py") if p.name != "__init__.py")
    assert not [n for n, c in names.items() if c > 1], names.most_common(3)


def test_the_report_computes_and_draws_but_reads_no_files():
    assert not {m for m in import_graph()["hoplib.report"] if m in ("hoplib.results", "hoplib.train")}
    assert "open(" not in (HOPLIB / "report.py").read_text()


@pytest.mark.slow
def test_every_module_imports_on_its_own_in_a_fresh_interpreter():
    # one interpreter per module: a module that works only after another was imported fails here
    failed = {}
    for name in _modules():
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd=ROOT,
                              env={"PATH": "", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, timeout=300)
        if proc.returncode:
            failed[name] = proc.stderr.strip().splitlines()[-1]
    assert not failed, failed
