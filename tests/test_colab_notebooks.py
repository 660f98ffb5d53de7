"""The generated Colab notebooks render in Jupyter and Colab: no MyST syntax is left in their Markdown, the
conversion of each MyST construct (scripts/colab_markdown.py) does what the book shows, and the install cell
fails in one line when the repository cannot be cloned."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import colab_markdown  # noqa: E402
import notebooks  # noqa: E402

CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
MYST_LEFTOVERS = {
    "glue role or directive": r"\{glue",
    "prf directive or role": r"\{prf:",
    "citation": r"\{cite",
    "ref role": r"\{ref\}",
    "numref role": r"\{numref\}",
    "doc role": r"\{doc\}",
    "exercise directive": r"\{exercise\}",
    "solution directive": r"\{solution",
    "colon-fence directive": r":::\{",
    "backtick-fence directive": r"```\{",
    "(label)= target": r"^\(.*\)=$",
    "\\hop macro": r"\\hop(?![A-Za-z])",
    "\\find macro": r"\\find(?![A-Za-z])",
    "\\bot macro": r"\\bot(?![A-Za-z])",
}


def exported_markdown(nb: nbformat.NotebookNode) -> str:
    """The notebook's Markdown cells through nbconvert's plain Markdown exporter."""
    from nbconvert import MarkdownExporter

    only_text = nbformat.v4.new_notebook(cells=[c for c in nb.cells if c.cell_type == "markdown"])
    body, _ = MarkdownExporter().from_notebook_node(only_text)
    return body


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_generated_notebook_markdown_has_no_myst_syntax(md):
    pytest.importorskip("nbconvert")
    body = exported_markdown(nbformat.read(md.with_suffix(".ipynb"), as_version=4))
    left = {what: re.findall(rf".{{0,30}}{pattern}.{{0,30}}", body, re.M)
            for what, pattern in MYST_LEFTOVERS.items()}
    assert not {k: v for k, v in left.items() if v}, f"MyST left in {md.with_suffix('.ipynb').name}"
    assert body.count("<details>") == body.count("</details>"), "every collapsed solution is closed"


def solution_parts(md: Path) -> tuple[list[str], list[str]]:
    """The code cells of a chapter's gated solutions, and the text of its solution directives."""
    import jupytext

    code, inside = [], False
    for cell in jupytext.read(md, fmt="md:myst").cells:
        if cell.cell_type == "markdown":
            for name, *_ in colab_markdown.iter_directives(cell.source):
                inside = {"solution-start": True, "solution-end": False}.get(name, inside)
        elif inside:
            code.append(cell.source)
    text = [body for name, _, _, body in colab_markdown.iter_directives(md.read_text(encoding="utf-8"))
            if name == "solution"]
    return code, text


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_every_exercise_has_a_student_cell_and_no_solution(md):
    source = md.read_text(encoding="utf-8")
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert text.count("> **Exercise") == source.count("{exercise}")
    answers = [c for c in nb.cells if {"exercise-answer", "lab-answer"} & set(c.metadata.get("tags", []))]
    assert len(answers) == source.count("{exercise}"), "every exercise keeps one empty cell for the student"
    code, prose = solution_parts(md)
    assert code or prose, "the chapter's solutions were found"
    shown = [c.source for c in nb.cells if c.cell_type == "code"]
    assert not [c for c in code if c in shown], "a solution's code cell is in the Colab notebook"
    first_lines = [b.strip().splitlines()[0][:60] for b in prose]
    assert not [f for f in first_lines if f in text], "a solution's text is in the Colab notebook"
    assert "Solution" not in text


def write_book(root: Path, repository: str = "https://github.com/Owner/demo-book") -> Path:
    """A two-chapter book with every MyST construct the converter handles; returns the main chapter."""
    (root / "chapters").mkdir()
    (root / "_config.yml").write_text(textwrap.dedent(f"""\
        bibtex_bibfiles: [references.bib]
        repository: {{url: {repository}, branch: main}}
        sphinx:
          config:
            mathjax3_config:
              tex:
                macros: {{hop: "\\\\mathrm{{hop}}", bot: "\\\\perp", pair: ["\\\\langle #1, #2 \\\\rangle", 2]}}
        """))
    (root / "references.bib").write_text(textwrap.dedent("""\
        @inproceedings{sanford2024transformers, title = {Transformers}, year = {2024},
          author = {Sanford, Clayton and Hsu, Daniel and Telgarsky, Matus}}
        @inproceedings{coy2022deterministic, title = {Connectivity}, year = 2022,
          author = {Coy, Sam and Czumaj, Artur}}
        @inproceedings{behnezhad2019near, title = {Near-optimal}, year = {2019},
          author = {{\\L}{\\k{a}}cki, Jakub}}
        """))
    (root / "chapters" / "other.md").write_text("(chap-other)=\n# The other chapter\n\nText.\n")
    main = root / "chapters" / "main.md"
    main.write_text(DEMO_CHAPTER)
    return main


DEMO_CHAPTER = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst, format_version: 0.13}
kernelspec: {display_name: Python 3, language: python, name: python3}
---

(chap-main)=
# Main

As {cite:t}`sanford2024transformers` show {cite:p}`coy2022deterministic,behnezhad2019near`, see {ref}`chap-other`.
The code span `{ref}` stays. Value {glue:text}`share_1` and $\\hop_k(x) = \\bot$, $\\pair{a}{b}$.

:::{prf:theorem} 4.2 of the paper (Log-depth construction)
:label: thm-demo
:nonumber:

For every $k$, depth $\\lceil \\log_2 k \\rceil + 2$ suffices.
:::

By {prf:ref}`Theorem 4.2 <thm-demo>` and [the other chapter](other.md).

```{code-cell} ipython3
x = 1
```

```{glue:figure} fig_demo
:name: fig-demo

The *caption* of the figure.
```

```{note}
A remark.
```

## Exercises

````{exercise}
:label: ex-demo

Use {numref}`fig-demo`.
````

````{solution-start} ex-demo
:class: dropdown
````

Explanation before the code.

```{code-cell} ipython3
answer = x + 1
```

````{solution-end}
````

After the exercise.
"""


@pytest.fixture
def demo(tmp_path, monkeypatch):
    main = write_book(tmp_path)
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(notebooks, "CHAPTERS", tmp_path / "chapters")
    return notebooks.to_notebook(main, {"share_1": "0.25", "fig_demo": "<Figure>"})


def test_demo_chapter_citations_references_glue_and_macros_become_plain_text(demo):
    text = "\n\n".join(c.source for c in demo.cells if c.cell_type == "markdown")
    assert "As Sanford et al. (2024) show (Coy and Czumaj, 2022; Łącki, 2019)" in text
    assert "[The other chapter](https://owner.github.io/demo-book/chapters/other.html)" in text
    assert "[the other chapter](https://owner.github.io/demo-book/chapters/other.html)" in text
    assert "The code span `{ref}` stays." in text
    assert "Value 0.25 and" in text, "glued values are filled in from the executed build"
    assert demo.metadata[notebooks.GLUE_KEY] == {"share_1": "0.25"}, "only the values its prose shows"
    assert r"$\mathrm{hop}_k(x) = \perp$, $\langle a, b \rangle$" in text, "macros come from _config.yml"
    first, title = [c.source for c in demo.cells if c.cell_type == "markdown"][:2]
    assert "(chap-main)=" not in text and first.startswith("> **How to run") and title.startswith("# Main")


def test_demo_chapter_boxes_and_exercises_render_as_quotes_and_solutions_are_left_out(demo):
    md = [c.source for c in demo.cells if c.cell_type == "markdown"]
    text = "\n\n".join(md)
    assert "> **Theorem 4.2 of the paper (Log-depth construction).** For every $k$, depth" in text
    assert "By Theorem 4.2 and" in text, "same-chapter prf:ref is its text"
    assert ":nonumber:" not in text
    assert "*Figure above: The *caption* of the figure.*" not in text and "The *caption* of the figure." in text
    assert "> **Note.** A remark." in text
    assert "> **Exercise.** Use the figure above." in text
    answer = next(i for i, c in enumerate(demo.cells) if "exercise-answer" in c.metadata.get("tags", []))
    assert demo.cells[answer - 1].source.endswith("> **Exercise.** Use the figure above."), "a cell for the student"
    assert "Explanation before the code." not in text and "Solution" not in text, "the solution is left out"
    code = [c for c in demo.cells if c.cell_type == "code" and "colab-install" not in c.metadata.get("tags", [])]
    assert [c.source for c in code] == ["x = 1", "# Your answer here\n"], "and so is its code cell"
    assert md[-1] == "After the exercise.", "the text after solution-end is kept"


LAB_STEP = """\

## Lab: a demo

````{exercise} ★ · 5 min · Lab step 1: add
:label: lab-demo-add

Write `add`.
````

```{code-cell} ipython3
:tags: [lab-answer]

# Step 1: write add(a, b) here
```

````{solution-start} lab-demo-add
:class: dropdown
````

```{code-cell} ipython3
def add(a, b):
    return a + b
```

````{solution-end}
````
"""


def test_a_lab_step_keeps_its_own_student_cell_and_loses_its_answer_key(tmp_path, monkeypatch):
    main = write_book(tmp_path)
    main.write_text(DEMO_CHAPTER + LAB_STEP)
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(notebooks, "CHAPTERS", tmp_path / "chapters")
    nb = notebooks.to_notebook(main, {"share_1": "0.25"})
    code = [c.source for c in nb.cells if c.cell_type == "code"][1:]  # after the install cell
    assert code == ["x = 1", "# Your answer here\n", "# Step 1: write add(a, b) here"]
    assert "> **Exercise (★ · 5 min · Lab step 1: add).** Write `add`." in "\n".join(
        c.source for c in nb.cells if c.cell_type == "markdown")


def test_exercises_carry_the_web_books_numbers_in_a_numbered_chapter(tmp_path, monkeypatch):
    main = write_book(tmp_path)
    (tmp_path / "_toc.yml").write_text(textwrap.dedent("""\
        format: jb-book
        root: intro
        parts:
          - caption: Front
            chapters: [{file: chapters/other}]
          - caption: Numbered
            numbered: true
            chapters: [{file: chapters/other}, {file: chapters/main.md}]
        """))
    main.write_text(DEMO_CHAPTER + LAB_STEP + LAB_STEP.replace("lab-demo-add", "lab-demo-two"))
    monkeypatch.setattr(notebooks, "ROOT", tmp_path)
    monkeypatch.setattr(notebooks, "CHAPTERS", tmp_path / "chapters")
    text = "\n".join(c.source for c in notebooks.to_notebook(main, {"share_1": "0.25"}).cells
                     if c.cell_type == "markdown")
    assert "> **Exercise 2.1.**" in text  # the demo chapter's own exercise, then the two lab steps
    assert "> **Exercise 2.2 (★ · 5 min · Lab step 1: add).**" in text
    assert "> **Exercise 2.3 (★ · 5 min · Lab step 1: add).**" in text
    assert "Exercise (" not in text


def test_figure_caption_in_italics_and_unknown_keys_fail(tmp_path):
    main = write_book(tmp_path)
    book = colab_markdown.load_book(tmp_path)
    chapter = colab_markdown.Chapter("chapters/main", book)
    figure = "```{glue:figure} fig_x\n:name: fig-x\n\nError against\n$k$.\n```"
    assert colab_markdown.convert_text(figure, chapter) == "*Figure above: Error against $k$.*"
    with pytest.raises(ValueError, match="unknown citation key 'nobody2020'"):
        colab_markdown.convert_text("{cite:p}`nobody2020`", chapter)
    with pytest.raises(ValueError, match="unknown reference target 'sec-missing'"):
        colab_markdown.convert_text("{ref}`sec-missing`", chapter)
    assert main.exists()


def test_book_url_is_the_github_pages_site_or_none():
    assert colab_markdown.book_url("https://github.com/Hoplib/logdepth-book") == "https://hoplib.github.io/logdepth-book"
    assert colab_markdown.book_url("https://gitlab.com/a/b") is None


def test_an_unknown_glued_value_fails_with_what_to_run(tmp_path):
    write_book(tmp_path)
    chapter = colab_markdown.Chapter("chapters/main", colab_markdown.load_book(tmp_path))
    with pytest.raises(ValueError, match="glued value 'share_1' of chapters/main is not known: build the book"):
        colab_markdown.convert_text("Value {glue:text}`share_1:.2f`.", chapter)
    chapter.values["share_1"] = "0.256"
    assert colab_markdown.convert_text("Value {glue:text}`share_1:.2f`.", chapter) == "Value 0.26."


def test_install_cell_stops_with_one_line_when_the_clone_fails(tmp_path, monkeypatch):
    cell = notebooks.INSTALL_CELL.format(**notebooks.repository())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOPLIB_INSTALL_SOURCE", str(tmp_path / "no-such-repository"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(Exception) as info:
        exec(compile(cell, "install-cell", "exec"), {"__name__": "__main__"})
    assert type(info.value).__name__ == "SetupError"
    lines = info.value._render_traceback_()  # what IPython and Colab print instead of a traceback
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "repository.url in _config.yml" in lines[0] and "python scripts/notebooks.py sync" in lines[0]
    assert str(tmp_path / "no-such-repository") in lines[0]
    assert not (tmp_path / notebooks.repository()["name"]).exists()


def test_a_literalinclude_becomes_the_code_it_names(tmp_path):
    write_book(tmp_path)
    (tmp_path / "lib.py").write_text("import os\n\n\nclass A:\n    def f(self):\n        return 1\n\n\ndef g():\n"
                                     "    return 2\n")
    book = colab_markdown.load_book(tmp_path)
    chapter = colab_markdown.Chapter("chapters/main", book)
    method = "```{literalinclude} ../lib.py\n:pyobject: A.f\n```"
    assert colab_markdown.convert_text(method, chapter) == "```python\ndef f(self):\n    return 1\n```"
    whole = colab_markdown.convert_text("```{literalinclude} ../lib.py\n```", chapter)
    assert whole.startswith("```python\nimport os") and whole.endswith("return 2\n```")
    with pytest.raises(ValueError, match="no 'h'"):
        colab_markdown.convert_text("```{literalinclude} ../lib.py\n:pyobject: h\n```", chapter)


def test_build_outputs_reach_the_notebook_cells_around_the_left_out_solutions(demo):
    run = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in ("x = 1", "answer = x + 1")])
    for i, cell in enumerate(run.cells):
        cell.outputs = [nbformat.v4.new_output("stream", text=f"out {i}\n")]
    filled = notebooks.with_outputs(demo, run)
    code = {c.source: c.outputs for c in filled.cells if c.cell_type == "code"}
    assert code["x = 1"][0]["text"] == "out 0\n", "matched by source past the solution's cell"
    assert "answer = x + 1" not in code and code["# Your answer here\n"] == []
    stale = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 2")])
    assert all(not c.get("outputs") for c in notebooks.with_outputs(demo, stale).cells), "no partial copies"


def test_an_indented_literalinclude_in_a_list_item_becomes_only_its_object(tmp_path):
    write_book(tmp_path)
    (tmp_path / "lib.py").write_text("import os\n\n\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n")
    chapter = colab_markdown.Chapter("chapters/main", colab_markdown.load_book(tmp_path))
    item = "1. **The first.** It reads:\n\n   ```{literalinclude} ../lib.py\n   :pyobject: g\n   ```\n\n   Then more."
    assert colab_markdown.convert_text(item, chapter) == (
        "1. **The first.** It reads:\n\n   ```python\n   def g():\n       return 2\n   ```\n\n   Then more.")


INCLUDE = re.compile(r"^(?P<indent> *)```\{literalinclude\} (?P<path>\S+)\n(?P<options>(?:(?P=indent):[\w-]+:.*\n)*)",
                     re.M)
FENCED = re.compile(r"^(?P<indent> *)```\w*\n(?P<body>.*?)^(?P=indent)```$", re.M | re.S)


def page_shows(md: Path, path: str, options: str) -> str:
    """What the web page shows for a ``literalinclude``: Sphinx's own reader of the directive, dedented (the
    notebook shows a method without its class's indentation)."""
    from sphinx.config import Config
    from sphinx.directives.code import LiteralIncludeReader

    opts = dict(re.match(r"\s*:([\w-]+):\s*(.*)", line).groups() for line in options.splitlines())
    text, _ = LiteralIncludeReader(str(md.parent / path), opts, Config({}, {})).read()
    return textwrap.dedent(text).rstrip("\n")


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_every_literalinclude_in_a_colab_notebook_holds_exactly_the_object_the_page_shows(md):
    includes = list(INCLUDE.finditer(md.read_text(encoding="utf-8")))
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    blocks = [textwrap.dedent("\n".join(line[len(m["indent"]):] for line in m["body"].split("\n"))).rstrip("\n")
              for c in nb.cells if c.cell_type == "markdown" for m in FENCED.finditer(c.source)]
    for inc in includes:
        shown = page_shows(md, inc["path"], inc["options"])
        assert shown in blocks, f"{md.name}: the notebook lacks {inc['path']} {inc['options'].strip()}"
    whole = {(md.parent / inc["path"]).read_text(encoding="utf-8").rstrip("\n") for inc in includes
             if "pyobject" in inc["options"]}
    assert not whole & set(blocks), f"{md.name}: a whole file where the page shows one object"
