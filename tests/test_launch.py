"""The "open in Colab" button opens a notebook that exists: it is shown on a page only where the generated
``.ipynb`` lies beside the page's source (_ext/hoplib_launch.py). Checked on the decision itself, on a small
Sphinx project with the book's theme, and on the built book when there is one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
import hoplib_launch  # noqa: E402

FRONT = """\
---
jupytext: {text_representation: {extension: .md, format_name: myst, format_version: 0.13}}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""
COLAB = re.compile(r'href="(https://colab\.research\.google\.com/github/[^"]+)"')


def test_a_page_has_a_colab_notebook_only_where_its_ipynb_exists(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "task.ipynb").write_text("{}")
    assert hoplib_launch.colab_notebook(tmp_path, "chapters/task") == tmp_path / "chapters" / "task.ipynb"
    assert hoplib_launch.colab_notebook(tmp_path, "intro") is None
    assert hoplib_launch.colab_notebook(tmp_path, "chapters/stored_runs/task") is None


def test_without_colab_keeps_the_other_buttons_and_drops_an_empty_launch_menu():
    colab = {"type": "link", "text": "Colab", "url": "https://colab.research.google.com/github/o/r/blob/main/a.md"}
    binder = {"type": "link", "text": "Binder", "url": "https://mybinder.org/v2/gh/o/r/main"}
    download = {"type": "group", "label": "download-buttons", "buttons": [{"url": "_sources/a.md"}]}
    only_colab = [download, {"type": "group", "label": "launch-buttons", "buttons": [colab]}]
    assert hoplib_launch.without_colab(only_colab) == [download]
    both = [{"type": "group", "label": "launch-buttons", "buttons": [colab, binder]}, download]
    assert hoplib_launch.without_colab(both) == [{"type": "group", "label": "launch-buttons",
                                                  "buttons": [binder]}, download]


def build_book(tmp_path: Path) -> Path:
    """A book of two notebook pages with the book's theme and Colab launch buttons, one with a generated
    ``.ipynb`` beside it; returns the HTML folder."""
    src = tmp_path / "src"
    (src / "chapters").mkdir(parents=True)
    (src / "index.md").write_text(FRONT + "# Landing\n\n```{toctree}\nchapters/task\n```\n")
    (src / "chapters" / "task.md").write_text(FRONT + "# Task\n\n```{code-cell} ipython3\nx = 1\n```\n")
    (src / "chapters" / "task.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, '
                                                 '"nbformat_minor": 5}')
    (src / "conf.py").write_text(textwrap.dedent("""\
        extensions = ["myst_nb", "hoplib_launch"]
        exclude_patterns = ["**/*.ipynb"]
        nb_execution_mode = "off"
        html_theme = "sphinx_book_theme"
        html_theme_options = {"repository_url": "https://github.com/owner/book", "repository_branch": "main",
                              "launch_buttons": {"colab_url": "https://colab.research.google.com"}}
        """))
    out = tmp_path / "html"  # built in a fresh interpreter: Sphinx keeps parser registrations per process
    build = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-E", "-b", "html", str(src), str(out)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "_ext")})
    assert build.returncode == 0, build.stderr
    return out


def test_only_the_page_with_a_notebook_gets_a_colab_button_and_it_opens_that_notebook(tmp_path):
    out = build_book(tmp_path)
    assert COLAB.findall((out / "index.html").read_text()) == [], "the landing page has no notebook"
    links = COLAB.findall((out / "chapters" / "task.html").read_text())
    assert links == ["https://colab.research.google.com/github/owner/book/blob/main/chapters/task.ipynb"]


BUILT = ROOT / "_build" / "html"


@pytest.mark.skipif(not BUILT.is_dir(), reason="needs a built book (bash scripts/build.sh)")
def test_every_colab_button_of_the_built_book_opens_a_committed_notebook():
    pages = sorted(p for p in BUILT.rglob("*.html") if "instructor" not in p.relative_to(BUILT).parts)
    for page in pages:
        for url in COLAB.findall(page.read_text(encoding="utf-8")):
            path = url.split("/blob/", 1)[1].split("/", 1)[1]
            assert path.endswith(".ipynb") and (ROOT / path).is_file(), f"{page.name}: Colab is handed {path}"
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        page = BUILT / "chapters" / f"{nb.stem}.html"
        assert any(u.endswith(f"chapters/{nb.name}") for u in COLAB.findall(page.read_text(encoding="utf-8")))
