"""The library's and the chapters' shape: the rules of CONTRIBUTING.md that a reader relies on, checked."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOPLIB = ROOT / "hoplib"
PARTS = ("construction", "mpc", "lower_bounds", "exercises")
CORE = sorted(p for p in HOPLIB.glob("*.py"))
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
APPENDIX = sorted((ROOT / "chapters" / "stored_runs").glob("*.md"))
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", flags=re.S | re.M)


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


@pytest.mark.parametrize("path", CORE + [HOPLIB / "_book" / "notebook.py"], ids=lambda p: p.name)
def test_the_core_and_the_notebook_start_import_no_part_of_the_book(path):
    parts = {f"hoplib.{p}" for p in PARTS}
    bad = sorted(n for n in _imports(path) if any(n == p or n.startswith(p + ".") for p in parts))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_every_sub_package_says_which_chapter_and_results_it_holds():
    for pkg in PARTS + ("_book",):
        doc = ast.get_docstring(ast.parse((HOPLIB / pkg / "__init__.py").read_text()))
        assert doc and len(doc) > 80, f"hoplib/{pkg}/__init__.py needs a docstring naming its chapter"


def test_no_hand_written_kernels_and_no_fused_option():
    assert not list(HOPLIB.rglob("*.c")) and not list(HOPLIB.rglob("*.so"))
    offenders = [p.name for p in HOPLIB.rglob("*.py") if re.search(r"\bfused\s*=", p.read_text())
                 and "torch.optim" not in p.read_text() and "AdamW" not in p.read_text()]
    assert not offenders, f"a `fused` option is back in {offenders}"


def test_no_function_in_hoplib_is_over_80_lines():
    long = []
    for path in HOPLIB.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long


def test_one_optimiser_loop():
    users = sorted(str(p.relative_to(ROOT)) for p in HOPLIB.rglob("*.py")
                   if re.search(r"torch\.optim\.(AdamW|Adam|SGD)\(", p.read_text()))
    assert users == ["hoplib/train.py"], users


@pytest.mark.parametrize("md", CHAPTERS + APPENDIX, ids=lambda p: p.stem)
def test_chapter_code_cells_are_short_with_short_lines(md):
    text = md.read_text()
    for m in CELL.finditer(text):
        body = re.sub(r"\A---\n.*?^---\n", "", m.group(1), flags=re.S | re.M)  # the cell's metadata block
        lines = [ln for ln in body.split("\n")[:-1] if not ln.startswith(":")]
        where = f"{md.name}:{text[:m.start()].count(chr(10)) + 1}"
        most = 35 if "nb.start(" in m.group(1) else 25  # the settings cell holds the profiles' table
        assert len(lines) <= most, f"{where}: a code cell of {len(lines)} lines (at most {most})"
        wide = [ln for ln in lines if len(ln) > 84]
        assert not wide, f"{where}: code lines over 84 characters (they scroll off the page): {wide[:2]}"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_a_main_chapter_glues_only_headlines_and_keeps_stored_runs_in_the_appendix(md):
    text = md.read_text()
    glued = re.findall(r"\{glue(?::\w+)?\}", text)
    assert len(glued) <= 10, f"{md.name}: {len(glued)} glued values (at most 10 headlines; print the rest)"
    for bookkeeping in ("provenance_html", "check_settings", "settings_text"):
        assert bookkeeping not in text, f"{md.name}: {bookkeeping} belongs in the stored-runs appendix"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_chapters_find_results_without_file_tricks(md):
    text = md.read_text()
    assert "__file__" not in text and '"../results' not in text and "'../results" not in text


def test_every_exercise_has_a_unique_label_a_difficulty_and_minutes_in_its_title():
    """The teaching page's exercise and lab tables are read from these titles (★ to ★★★ · N min · what it asks);
    a lab step is an exercise labelled ``lab-...``."""
    labels = []
    for md in CHAPTERS:
        text = md.read_text()
        directives = re.findall(r"^````\{exercise\}[^\n]*\n", text, flags=re.M)
        titled = re.findall(r"^````\{exercise\} ★{1,3} · [1-9]\d* min · \S[^\n]*\n:label: ((?:ex|lab)-[\w-]+)$", text,
                            flags=re.M)
        assert directives and len(titled) == len(directives), f"{md.name}: an exercise without its title"
        labels += titled
    assert len(labels) == len(set(labels)), "two exercises share a label"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_statements_carry_the_papers_numbers_never_the_books(md):
    """Every prf box is unnumbered and titled by the paper's number or marked as ours; every reference names it."""
    lines = md.read_text().split("\n")
    for i, line in enumerate(lines):
        box = re.match(r"^:::+\{prf:(\w+)\}\s*(.*)$", line)
        if box and box.group(1) != "proof":
            options = lines[i + 1:i + 4]
            assert ":nonumber:" in options, f"{md.name}:{i + 1}: prf box without :nonumber:"
            assert re.match(r"^([A-Z]?[\d.]+ of the paper|\()", box.group(2)), \
                f"{md.name}:{i + 1}: title {box.group(2)!r} neither starts with the paper's number nor says ours"
    bare = re.findall(r"\{prf:ref\}`[^`<]*`", md.read_text())
    assert not bare, f"{md.name}: references without the paper's number as text: {bare[:3]}"
