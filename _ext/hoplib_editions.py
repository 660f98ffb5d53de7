"""The book's two editions. The student edition (the default) leaves every exercise solution and lab
answer key out of the pages; the instructor edition shows them open, not in a dropdown.

The edition is the Sphinx config value ``hoplib_edition``, set by the environment variable ``HOPLIB_EDITION``
(``student`` or ``instructor``) because ``jupyter-book build`` passes no ``-D`` options:
``scripts/build_instructor.sh`` sets it. The instructor edition reads the student build's execution cache
(``_build/.jupyter_cache`` beside the book) unless ``execute.cache`` names another, so it does not execute the
chapters again.

Solutions are removed by a transform that runs after sphinx-exercise merges each gated solution
(``solution-start`` ... ``solution-end``, which holds the solution's code cells) into one node. sphinx-exercise's
own ``hide_solutions`` (1.2.1) cannot be used: it drops the ``solution-start`` marker only, so the gated
solution's text and code stay on the page and the HTML writer fails on the orphan ``solution-end`` node
(``NotImplementedError: ... unknown node type: solution_end_node``). The solution cells still execute in both
editions (the build checks every solution); only what the page shows differs.

The student edition also keeps solutions out of what its pages offer for download: Sphinx copies each page's
source to ``_sources/`` (the ".md" download) and sphinx-book-theme copies the executed notebook there (the
".ipynb" download), both with every solution in them. When the build has finished, :func:`strip_solutions`
rewrites both without them (``scripts/notebooks.py sync --from-build`` then puts each chapter's Colab notebook,
with the build's outputs, in place of its ".ipynb").
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError
from sphinx.transforms import SphinxTransform
from sphinx_exercise.nodes import solution_node

EDITIONS = ("student", "instructor")


class ApplyEdition(SphinxTransform):
    """Student edition: remove every solution node. Instructor edition: show each one open."""

    default_priority = 20  # after sphinx-exercise's MergeGatedSolutions (10)

    def apply(self) -> None:
        for node in list(self.document.findall(solution_node)):
            if self.config.hoplib_edition == "student":
                node.parent.remove(node)
            else:
                node["classes"] = [c for c in node["classes"] if c != "dropdown"]


def choose_edition(app: Sphinx, config: Config) -> None:
    """Read ``HOPLIB_EDITION``; a misspelt edition would silently build the student one, so it is an error."""
    config.hoplib_edition = os.environ.get("HOPLIB_EDITION", config.hoplib_edition)
    if config.hoplib_edition not in EDITIONS:
        raise ConfigError(f"HOPLIB_EDITION must be one of {', '.join(EDITIONS)}, got {config.hoplib_edition!r}")
    app.tags.add(config.hoplib_edition)  # a page can say which edition it is in: ```{only} student```
    if config.hoplib_edition == "instructor" and "nb_execution_cache_path" in config \
            and not config.nb_execution_cache_path:  # myst-nb is loaded and no cache is named
        config.nb_execution_cache_path = str(Path(app.srcdir, "_build", ".jupyter_cache"))


SOLUTION = re.compile(r"^ {0,3}(?P<fence>`{3,}|:{3,})\{(?P<name>solution(?:-start|-end)?)\}")


def _close(lines: list[str], start: int, fence: str) -> int:
    """Index of the line that closes the fence opened at ``lines[start]`` (the last line if none does)."""
    for j in range(start + 1, len(lines)):
        s = lines[j].strip()
        if s and set(s) == {fence[0]} and len(s) >= len(fence):
            return j
    return len(lines) - 1


def strip_solutions(text: str, inside: bool = False) -> tuple[str, bool]:
    """MyST Markdown without its solutions: every ``{solution}`` directive, and everything from a
    ``{solution-start}`` to the end of its ``{solution-end}`` (the text and code cells of a gated solution).
    ``inside``: whether ``text`` starts within a gated solution (a notebook's cells are read one at a time);
    returns the text and whether it ends within one."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = SOLUTION.match(lines[i])
        if m:
            inside = {"solution-start": True, "solution-end": False}.get(m["name"], inside)
            i = _close(lines, i, m["fence"]) + 1
            continue
        if not inside:
            out.append(lines[i])
        i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)), inside


def strip_notebook_solutions(nb: dict) -> dict:
    """A notebook (as JSON) without its solutions: Markdown cells through :func:`strip_solutions`, the code cells
    of gated solutions left out, and cells left empty dropped."""
    cells, inside = [], False
    for cell in nb.get("cells", []):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            source, inside = strip_solutions(source, inside)
            if source.strip():
                cells.append({**cell, "source": source})
        elif not inside:
            cells.append(cell)
    return {**nb, "cells": cells}


def strip_download_sources(app: Sphinx, exception: Exception | None) -> None:
    """``build-finished``, student edition: rewrite the pages' ".md" and ".ipynb" downloads without solutions."""
    sources = Path(app.outdir, "_sources")
    if exception is not None or app.config.hoplib_edition != "student" or not sources.is_dir():
        return
    for path in sorted(sources.rglob("*")):
        name = path.name.removesuffix(app.config.html_sourcelink_suffix or "\0")  # "index.md.txt" in plain Sphinx
        if name.endswith(".md"):
            text = path.read_text(encoding="utf-8")
            stripped, _ = strip_solutions(text)
            if stripped != text:
                path.write_text(stripped, encoding="utf-8")
        elif name.endswith(".ipynb"):
            nb = json.loads(path.read_text(encoding="utf-8"))
            stripped_nb = strip_notebook_solutions(nb)
            if stripped_nb != nb:
                path.write_text(json.dumps(stripped_nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def setup(app: Sphinx) -> dict[str, object]:
    app.add_config_value("hoplib_edition", "student", "env", [str])
    app.connect("config-inited", choose_edition, priority=400)  # before myst-nb reads the cache path
    app.add_transform(ApplyEdition)
    app.connect("build-finished", strip_download_sources)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
