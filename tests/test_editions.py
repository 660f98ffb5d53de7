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
