"""What a Colab user meets first: the notebook opens with what to run, how long the build took to run it (read
from the build's execution cache, never typed in) and where the prose numbers come from; the setup cell and the
exercise checkers are collapsed to their titles (Colab's form view, Jupyter's hidden source)."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import colab_markdown  # noqa: E402
import notebooks  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


def collapsed(cell: nbformat.NotebookNode) -> bool:
    return (cell.source.startswith(colab_markdown.TITLE) and cell.metadata.get("cellView") == "form"
            and cell.metadata.get("jupyter", {}).get("source_hidden") is True)


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_a_chapter_notebook_opens_with_how_to_run_it_and_its_setup_and_checkers_collapsed(md):
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and "Run all" in first.source
    assert "numbers in the text come from the web book's build" in first.source
    seconds = nb.metadata.get(notebooks.SECONDS_KEY)
    timed = colab_markdown.run_time(seconds) if seconds is not None else "has not timed this chapter"
    assert timed in first.source, "the time stated is the one the build measured"
    install = next(c for c in nb.cells if "colab-install" in c.metadata.get("tags", []))
    assert collapsed(install) and install is next(c for c in nb.cells if c.cell_type == "code")
    checkers = [c for c in nb.cells if "exercise-checkers" in c.metadata.get("tags", [])]
    assert checkers and all(collapsed(c) for c in checkers)


def test_run_time_in_words():
    assert colab_markdown.run_time(None) == ""
    assert colab_markdown.run_time(12.0) == "under a minute"
    assert colab_markdown.run_time(60.0) == "about 1 minute"
    assert colab_markdown.run_time(150.0) == "about 3 minutes"


CHAPTER = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst, format_version: 0.13}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
# Demo

```{code-cell} ipython3
print("hello")
```

## Exercises

```{code-cell} ipython3
:tags: [hide-input, exercise-checkers]

def check_it(f):
    return f() == 1
```
"""


def demo(tmp_path: Path, monkeypatch) -> Path:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    md = chapters / "demo.md"
    md.write_text(CHAPTER)
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(notebooks, "CHAPTERS", chapters)
    monkeypatch.setattr(notebooks, "BUILD", tmp_path / "_build")
    return md


def cache_build(tmp_path: Path, md: Path, seconds: float) -> None:
    """Store ``md`` in a build's execution cache as executed in ``seconds``, with outputs in every cell."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    built = jupytext.read(md, fmt="md:myst")
    for cell in built.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"ran {cell.source[:9]}\n")]
    cache = get_cache(tmp_path / "_build" / ".jupyter_cache")
    cache.clear_cache()
    cache.cache_notebook_bundle(CacheBundleIn(built, str(md), data={"execution_seconds": seconds}),
                                check_validity=False)


def test_the_stated_time_is_the_builds_and_a_plain_sync_keeps_it(tmp_path, monkeypatch):
    md = demo(tmp_path, monkeypatch)
    (tmp_path / "_build" / "html" / "_sources" / "chapters").mkdir(parents=True)
    cache_build(tmp_path, md, 150.0)
    notebooks.sync(from_build=True)
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    assert "ran in about 3 minutes when the web book was built" in nb.cells[0].source
    assert nb.metadata[notebooks.SECONDS_KEY] == 150.0
    download = nbformat.read(tmp_path / "_build" / "html" / "_sources" / "chapters" / "demo.ipynb", as_version=4)
    checker = next(c for c in download.cells if "exercise-checkers" in c.metadata.get("tags", []))
    assert collapsed(checker) and "ran def check" in checker.outputs[0]["text"], "outputs reach collapsed cells"
    shutil.rmtree(tmp_path / "_build")
    assert notebooks.sync() == [] and notebooks.check() == [], "a plain sync keeps the build's time"
    (tmp_path / "_build" / "html" / "_sources" / "chapters").mkdir(parents=True)
    cache_build(tmp_path, md, 41.0)
    notebooks.sync(from_build=True)
    assert "ran in under a minute" in nbformat.read(md.with_suffix(".ipynb"), as_version=4).cells[0].source


def test_a_notebook_no_build_has_timed_says_so(tmp_path, monkeypatch):
    md = demo(tmp_path, monkeypatch)
    notebooks.sync()
    first = nbformat.read(md.with_suffix(".ipynb"), as_version=4).cells[0].source
    assert "has not timed this chapter yet" in first and textwrap.dedent(first).startswith("> **How to run")
