"""The student edition leaves exercise solutions and lab answer keys out of the pages; the instructor edition
shows them open (_ext/hoplib_editions.py). Checked on a one-page Sphinx project with the book's exercise
extension, not on the whole book."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))

PAGE = """\
# Page

````{exercise} ★ · 5 min · add one
:label: ex-add

Write `add_one(x)`.
````

````{solution-start} ex-add
:class: dropdown
````

Gated answer text.

```python
def add_one(x):
    return x + 1
```

````{solution-end}
````

````{exercise} ★ · 5 min · in words
:label: ex-words

Why?
````

````{solution} ex-words
:class: dropdown

Plain answer text.
````

After the exercises.
"""


def build_page(tmp_path: Path, monkeypatch, edition: str | None) -> str:
    """Build PAGE with Sphinx, in ``edition`` (None: HOPLIB_EDITION unset), and return its HTML."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace, patch_docutils

    src = tmp_path / "src"
    src.mkdir()
    (src / "index.md").write_text(PAGE, encoding="utf-8")
    (src / "conf.py").write_text(textwrap.dedent("""\
        extensions = ["myst_parser", "sphinx_exercise", "hoplib_editions"]
        myst_enable_extensions = ["colon_fence"]
        exercise_style = "solution_follow_exercise"
        """))
    if edition is None:
        monkeypatch.delenv("HOPLIB_EDITION", raising=False)
    else:
        monkeypatch.setenv("HOPLIB_EDITION", edition)
    out = tmp_path / "html"
    with patch_docutils(str(src)), docutils_namespace():  # a fresh docutils registry per build
        app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html",
                     status=None, warning=None, freshenv=True, warningiserror=True)
        app.build()
    return (out / "index.html").read_text(encoding="utf-8")


def test_student_edition_leaves_out_gated_and_plain_solutions(tmp_path, monkeypatch):
    html = build_page(tmp_path, monkeypatch, None)
    assert "Write <code" in html and "Why?" in html and "After the exercises." in html
    for answer in ("Gated answer text", "add_one</span><span class=\"p\">(</span><span class=\"n\">x",
                   "return", "Plain answer text", "solution"):
        assert answer not in html, f"the student edition shows {answer!r}"


def test_instructor_edition_shows_every_solution_open(tmp_path, monkeypatch):
    html = build_page(tmp_path, monkeypatch, "instructor")
    for answer in ("Gated answer text", "return", "Plain answer text"):
        assert answer in html
    assert html.count('class="solution') == 2 and "dropdown" not in html


def test_a_misspelt_edition_stops_the_build(tmp_path, monkeypatch):
    from sphinx.errors import ConfigError

    with pytest.raises(ConfigError, match="HOPLIB_EDITION must be one of student, instructor"):
        build_page(tmp_path, monkeypatch, "instuctor")


def test_the_book_loads_the_editions_extension_and_the_build_scripts_choose_one():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert "hoplib_editions" in config["sphinx"]["local_extensions"]
    assert "HOPLIB_EDITION=student jupyter-book build" in (ROOT / "scripts" / "build.sh").read_text()
    instructor = (ROOT / "scripts" / "build_instructor.sh").read_text()
    assert "HOPLIB_EDITION=instructor jupyter-book build . --path-output _build/instructor" in instructor


def test_student_edition_downloads_leave_solutions_out_and_the_instructors_keep_them(tmp_path, monkeypatch):
    """The page's ".md" download (Sphinx's copy of the source in _sources/) holds no solution in the student
    edition; the instructor edition's still holds every one."""
    (tmp_path / "student").mkdir()
    build_page(tmp_path / "student", monkeypatch, None)
    student = (tmp_path / "student" / "html" / "_sources" / "index.md.txt").read_text(encoding="utf-8")
    assert "Write `add_one(x)`." in student and "After the exercises." in student
    for answer in ("Gated answer text", "return x + 1", "Plain answer text", "{solution"):
        assert answer not in student, f"the student edition's download holds {answer!r}"
    (tmp_path / "instructor").mkdir()
    build_page(tmp_path / "instructor", monkeypatch, "instructor")
    instructor = (tmp_path / "instructor" / "html" / "_sources" / "index.md.txt").read_text(encoding="utf-8")
    assert instructor == PAGE


def test_strip_solutions_removes_plain_and_gated_solutions_and_keeps_nested_code():
    from hoplib_editions import strip_notebook_solutions, strip_solutions

    text, inside = strip_solutions(PAGE + "\n```python\nkept = 1\n```\n")
    assert not inside and "kept = 1" in text and "````{exercise} ★ · 5 min · add one" in text
    assert "Gated answer text" not in text and "Plain answer text" not in text and "return x + 1" not in text
    assert "Write `add_one(x)`." in text and "Why?" in text and "After the exercises." in text
    cells = [{"cell_type": "markdown", "source": "Intro.\n\n````{solution-start} ex\n````\n\nThe answer."},
             {"cell_type": "code", "source": "answer = 42", "outputs": []},
             {"cell_type": "markdown", "source": ["````{solution-end}\n", "````\n", "\n", "Next part."]},
             {"cell_type": "code", "source": "shown = 1", "outputs": []}]
    out = strip_notebook_solutions({"cells": cells, "metadata": {}})
    assert [c["source"] for c in out["cells"]] == ["Intro.\n", "\nNext part.", "shown = 1"]


BUILT = ROOT / "_build" / "html"


@pytest.mark.skipif(not (BUILT / "_sources").is_dir(), reason="needs a built book (bash scripts/build.sh)")
def test_the_built_books_downloads_hold_no_solution():
    """Every ".md" and ".ipynb" the student edition's pages offer for download, scanned for the chapters'
    solutions (their directives, their code lines and their text lines)."""
    from test_solutions import leaks, solution_lines

    lines = {md.stem: solution_lines(md) for md in sorted((ROOT / "chapters").glob("*.md"))}
    for path in sorted((BUILT / "_sources").rglob("*")):
        if path.suffix in (".md", ".ipynb") and "instructor" not in path.relative_to(BUILT).parts:
            text = path.read_text(encoding="utf-8")
            assert "{solution" not in text, f"{path.relative_to(BUILT)} holds a solution directive"
            found = leaks(text, lines.get(path.stem, set()))
            assert not found, f"{path.relative_to(BUILT)} holds solution lines: {found[:3]}"


def test_the_instructor_edition_is_published_beside_the_student_one_and_the_teaching_page_says_where():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    runs = [s.get("run", "") for s in workflow["jobs"]["build"]["steps"]]
    assert runs.index("bash scripts/build_instructor.sh") > runs.index("bash scripts/build.sh")  # from its cache
    assert "bash scripts/build_instructor.sh" not in (ROOT / ".ci" / "run").read_text(), "CI's test run stays lean"
    script = (ROOT / "scripts" / "build_instructor.sh").read_text()
    assert "cp -r _build/instructor/_build/html _build/html/instructor" in script
    teaching = (ROOT / "teaching.md").read_text()
    assert '```{only} html and student' in teaching and 'href="instructor/teaching.html"' in teaching
    assert '```{only} html and instructor' in teaching and 'href="../teaching.html"' in teaching
