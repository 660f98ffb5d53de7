"""MyST Markdown -> the plain Markdown that Jupyter and Colab render, for the generated notebooks.

The book's chapters use Jupyter Book syntax that a notebook viewer shows raw: ``{prf:theorem}`` boxes,
admonitions, ``{cite:p}`` citations, ``{ref}``/``{numref}``/``{prf:ref}``/``{doc}`` cross references, ``(label)=``
targets, ``{glue:text}`` values, ``{glue:figure}`` blocks, exercises and solutions, and the math macros of
``_config.yml``. :func:`convert_cells` rewrites the Markdown cells of a chapter notebook:

- prf boxes and admonitions become block quotes with a bold title (``> **Theorem 4.2 of the paper (...).** ...``);
  exercises become a bold "Exercise" block quote; solutions are left out, text and code cells of a gated
  solution (``solution-start`` ... ``solution-end``) alike: the notebooks are the student edition, and the
  answers are in the instructor edition (``scripts/build_instructor.sh``);
- citations become author-year text read from ``references.bib``; cross references become text, linked to the
  web book (GitHub Pages of ``repository.url``) when the target is in another page;
- ``{glue:text}`name``` becomes the value the executed book build glued (:func:`glued_values` reads it from
  myst-nb's executed notebook; the committed notebook keeps it in its metadata), and a ``{glue:figure}`` block
  its caption in italics (the figure is the output of the cell that draws it);
- every exercise is followed by an empty code cell for the student's answer (a lab step brings its own, a code
  cell tagged ``lab-answer``, which is kept instead);
- the macros of ``sphinx.config.mathjax3_config`` are expanded.

Anything it cannot resolve (an unknown citation key, reference target or glued value) raises ``ValueError``: the
book build fails on those too. The .bib file is read with pybtex and its LaTeX decoded with latexcodec.
"""

from __future__ import annotations

import ast
import math
import re
import textwrap
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import latexcodec  # noqa: F401 - registers the "latex" codec
import pybtex.database
import yaml
from myst_nb.core.variables import format_plain_text

OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:.-]+)\}[ \t]*(?P<arg>.*?)\s*$")
PLAIN_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})")
LABEL_LINE = re.compile(r"^\((?P<label>[^()\s]+)\)=\s*$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
INLINE = re.compile(r"\{(?P<role>[\w:.-]+)\}(?P<tick>`+)(?P<content>.+?)(?P=tick)|(?P<code>(?P<ct>`+).+?(?P=ct))"
                    r"|\[(?P<text>[^\]\n]*)\]\((?P<href>#[\w.:-]+|[\w./-]+\.(?:md|ipynb)(?:#[\w.:-]+)?)\)", re.S)
BLOCK_START = re.compile(r"^\s*([-*+>#|]|\d+[.)]\s|\$\$|```|<)")
ADMONITIONS = ("note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
               "seealso", "admonition", "margin", "sidebar", "topic", "epigraph")
GLUE_ROLES = ("glue", "glue:", "glue:text", "glue:md", "glue:math", "glue:any")
STUDENT = "<!-- hoplib: the student's cell -->"  # split point: an empty code cell goes here


# --------------------------------------------------------------------------------------------- the book's data
@dataclass(frozen=True)
class Target:
    """A place a cross reference can point at: its text, the page (``chapters/hop_task``) and its kind."""

    text: str
    doc: str
    kind: str  # "chapter", "section", "prf", "figure", "exercise", "other"


@dataclass
class Book:
    """What conversion needs from the whole book: citations, reference targets, macros, the web book's URL."""

    citations: dict[str, tuple[str, str]]  # key -> (authors as cited, year)
    targets: dict[str, Target]
    macros: dict[str, tuple[str, int]]  # name -> (body, number of arguments)
    url: str | None
    root: Path = Path(".")
    numbers: dict[str, int] = field(default_factory=dict)  # doc -> chapter number (numbered parts of _toc.yml)


@dataclass
class Chapter:
    """The state of one chapter's conversion: where it is, which figures came before, whether inside a solution."""

    doc: str
    book: Book
    seen: set[str] = field(default_factory=set)
    in_solution: bool = False
    values: dict[str, str] = field(default_factory=dict)  # glue name -> text/plain of the executed build
    exercises: int = 0  # exercises converted so far: the next is number exercises + 1, as in the web book


def latex_to_text(text: str) -> str:
    """Plain Unicode for the LaTeX of a .bib field (``{\\'e}`` -> é), braces dropped."""
    return unicodedata.normalize("NFC", re.sub(r"[{}]", "", text.encode().decode("latex"))).strip()


def parse_bib(text: str) -> dict[str, tuple[str, str]]:
    """Citation key -> (authors as cited: "Sanford", "Coy and Czumaj" or "Sanford et al.", year)."""
    entries = {}
    for key, entry in pybtex.database.parse_string(text, "bibtex").entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        surnames = [latex_to_text(" ".join(p.last_names)) for p in people if str(p) != "others"]
        if not surnames:
            cited = latex_to_text(entry.fields.get("title", key))
        elif len(surnames) == 1 and len(people) == 1:
            cited = surnames[0]
        elif len(surnames) == 2 and len(people) == 2:
            cited = f"{surnames[0]} and {surnames[1]}"
        else:
            cited = f"{surnames[0]} et al."
        entries[key] = (cited, latex_to_text(entry.fields.get("year", "n.d.")))
    return entries


def book_url(repository_url: str) -> str | None:
    """The web book's address for a GitHub repository (its GitHub Pages site), else ``None``."""
    m = re.match(r"^https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", repository_url)
    return f"https://{m[1].lower()}.github.io/{m[2]}" if m else None


def mathjax_macros(config: dict) -> dict[str, tuple[str, int]]:
    """The macros of ``sphinx.config.mathjax3_config.tex.macros``: ``"body"`` or ``["body", n_args]``."""
    macros = (((config.get("sphinx") or {}).get("config") or {}).get("mathjax3_config") or {})
    macros = (macros.get("tex") or {}).get("macros") or {}
    out = {}
    for name, value in macros.items():
        body, n = (value, 0) if isinstance(value, str) else (value[0], int(value[1]))
        out[name] = (body, n)
    return out


def expand_macros(text: str, macros: dict[str, tuple[str, int]]) -> str:
    """Replace ``\\name`` (and its ``{arg}`` groups) by the macro's body; longer names first."""
    for name in sorted(macros, key=len, reverse=True):
        body, n = macros[name]
        args = r"\s*\{([^{}]*)\}" * n
        pattern = re.compile(rf"\\{re.escape(name)}(?![A-Za-z]){args}")
        text = pattern.sub(lambda m, body=body: re.sub(r"#(\d)", lambda a: m[int(a[1])], body), text)
    return text


# ------------------------------------------------------------------------------------------ directive parsing
def find_close(lines: list[str], start: int, fence: str) -> int:
    """Index of the line closing the fence opened at ``lines[start]`` (``len(lines)`` if it is never closed)."""
    for j in range(start + 1, len(lines)):
        s = lines[j].strip()
        if s and set(s) == {fence[0]} and len(s) >= len(fence):
            return j
    return len(lines)


def indentation(line: str) -> int:
    """The spaces before a directive's opening fence (3 inside a list item such as ``1. ...``)."""
    return len(line) - len(line.lstrip(" "))


def unindent(body: list[str], indent: int) -> list[str]:
    """A directive's lines without the indentation of its opening fence, so that options indented with it (a
    ``literalinclude`` inside a list item) are read as options and not as content."""
    return [line[min(indent, indentation(line)):] for line in body]


def reindent(text: str, indent: int) -> str:
    """A converted directive indented as its source was, so that it stays inside its list item."""
    return "\n".join(" " * indent + line if line.strip() else line for line in text.split("\n"))


def split_options(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive's ``:key: value`` options (or ``---`` YAML block) and the lines of its content."""
    options: dict[str, str] = {}
    if body and body[0].strip() == "---":
        end = next((i for i in range(1, len(body)) if body[i].strip() == "---"), 0)
        options = {str(k): str(v) for k, v in (yaml.safe_load("\n".join(body[1:end])) or {}).items()}
        return options, body[end + 1:]
    i = 0
    while i < len(body) and (m := OPTION.match(body[i])):
        options[m["key"]] = m["value"].strip()
        i += 1
    return options, body[i:]


def prf_heading(name: str, arg: str) -> str:
    """The title of a prf box as the book shows it (``proof_title_format: "%t"``, every box ``:nonumber:``): the
    kind, then the title, e.g. "Theorem 4.2 of the paper (log-depth construction)"."""
    kind = name.split(":", 1)[1].capitalize()
    arg = arg.strip()
    return f"{kind} {arg}" if arg else kind


def iter_directives(text: str):
    """Every directive of ``text``, nested ones included: ``(name, argument, options, content)``."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        end = find_close(lines, i, m["fence"])
        options, content = split_options(unindent(lines[i + 1:end], indentation(lines[i])))
        yield m["name"], m["arg"], options, "\n".join(content)
        yield from iter_directives("\n".join(content))
        i = end + 1


def exercise_title(arg: str, number: int | None, index: int) -> str:
    """"Exercise 1.3 (★ · 10 min · ...)": the web book's number (chapter.index) where the chapter is numbered."""
    title = f"Exercise {number}.{index}" if number else "Exercise"
    return f"{title} ({arg})" if arg else title


def chapter_numbers(toc: dict) -> dict[str, int]:
    """{doc: chapter number}: the chapters of the numbered parts of ``_toc.yml``, counted across parts."""
    docs = [c["file"] for part in toc.get("parts", []) if part.get("numbered") for c in part.get("chapters", [])]
    return {doc.removesuffix(".md"): n for n, doc in enumerate(docs, start=1)}


def scan_targets(path: Path, doc: str, number: int | None = None) -> dict[str, Target]:
    """The reference targets defined in one page: ``(label)=`` before a heading, labelled directives;
    ``number``: the chapter's number, which exercises carry."""
    text = path.read_text(encoding="utf-8")
    targets: dict[str, Target] = {}
    exercises = 0
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if m := LABEL_LINE.match(line):
            heading = next((s for s in lines[i + 1:] if s.strip()), "")
            h = re.match(r"^(#+)\s+(.*)$", heading)
            title, kind = (h[2].strip(), "chapter" if len(h[1]) == 1 else "section") if h else (m["label"], "other")
            targets[m["label"]] = Target(title, doc, kind)
    for name, arg, options, _ in iter_directives(text):
        exercises += name in ("exercise", "exercise-start")
        label = options.get("label") or options.get("name")
        if not label:
            continue
        if name.startswith("prf:"):
            targets[label] = Target(prf_heading(name, arg), doc, "prf")
        elif name in ("glue:figure", "figure"):
            targets[label] = Target("the figure", doc, "figure")
        elif name in ("exercise", "exercise-start"):
            targets[label] = Target(exercise_title(arg, number, exercises), doc, "exercise")
        else:
            targets[label] = Target(arg or label, doc, "other")
    return targets


def load_book(root: Path) -> Book:
    """Read references.bib, the pages of _toc.yml and _config.yml of the book at ``root``."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    citations: dict[str, tuple[str, str]] = {}
    for bib in config.get("bibtex_bibfiles", []):
        if (root / bib).exists():
            citations.update(parse_bib((root / bib).read_text(encoding="utf-8")))
    toc_path = root / "_toc.yml"
    numbers = chapter_numbers(yaml.safe_load(toc_path.read_text(encoding="utf-8"))) if toc_path.exists() else {}
    pages = sorted(root.glob("*.md")) + sorted((root / "chapters").rglob("*.md"))
    targets: dict[str, Target] = {}
    for page in pages:
        if page.name not in ("README.md", "CONTRIBUTING.md"):
            doc = page.relative_to(root).with_suffix("").as_posix()
            targets.update(scan_targets(page, doc, numbers.get(doc)))
    url = book_url(str((config.get("repository") or {}).get("url", "")).rstrip("/"))
    return Book(citations, targets, mathjax_macros(config), url, root, numbers)


# ------------------------------------------------------------------------------------------------ inline roles
def cite(role: str, content: str, book: Book) -> str:
    """``{cite:p}`a,b``` -> "(A et al., 2024; B, 2023)"; ``{cite:t}`a``` -> "A et al. (2024)"."""
    parts = []
    for key in (k.strip() for k in content.split(",")):
        if key not in book.citations:
            raise ValueError(f"unknown citation key {key!r}: add it to references.bib")
        parts.append(book.citations[key])
    kind = role.split(":", 1)[1] if ":" in role else "p"
    if kind in ("t", "ts"):
        return " and ".join(f"{who} ({year})" for who, year in parts)
    if kind == "author":
        return " and ".join(who for who, _ in parts)
    if kind in ("year", "yearpar"):
        years = "; ".join(year for _, year in parts)
        return f"({years})" if kind == "yearpar" else years
    inner = "; ".join(f"{who}, {year}" for who, year in parts)
    return inner if kind == "alp" else f"({inner})"


def _explicit(content: str) -> tuple[str | None, str]:
    """``text <label>`` -> (text, label); ``label`` -> (None, label)."""
    m = re.match(r"^(.*?)\s*<([^<>]+)>$", content.strip(), re.S)
    return (m[1].strip() or None, m[2].strip()) if m else (None, content.strip())


def _doc_label(label: str, chapter: Chapter) -> str:
    """The page a ``{doc}`` path names, relative to the chapter's folder (or to the book's root with "/")."""
    base = [] if label.startswith("/") else chapter.doc.split("/")[:-1]
    for part in label.strip("/").removesuffix(".md").removesuffix(".ipynb").split("/"):
        base = base[:-1] if part == ".." else base + ([part] if part not in (".", "") else [])
    return "/".join(base)


def reference(role: str, content: str, chapter: Chapter) -> str:
    """A cross reference as text, linked to the web book when its target is on another page."""
    text, label = _explicit(content)
    book = chapter.book
    if role == "doc":
        doc = _doc_label(label, chapter)
        title = next((t.text for t in book.targets.values() if t.doc == doc and t.kind == "chapter"), None)
        target = Target(title or doc.rsplit("/", 1)[-1].replace("_", " "), doc, "page")
        anchor = ""
    else:
        if label not in book.targets:
            raise ValueError(f"unknown reference target {label!r} in {chapter.doc}")
        target = book.targets[label]
        anchor = "" if target.kind == "chapter" else f"#{label}"
    shown = text or target.text
    if target.kind == "figure" and text is None:
        if target.doc == chapter.doc:
            return "the figure above" if label in chapter.seen else "the figure below"
        shown = "a figure of another chapter"
    if text and "{number}" in text:
        shown = text.replace("{number}", "").strip()
    if target.doc == chapter.doc or book.url is None:
        return shown
    return f"[{shown}]({book.url}/{target.doc}.html{anchor})"


def markdown_link(text: str, href: str, chapter: Chapter) -> str:
    """A MyST link to a label (``#label``) or to a page (``other.md#anchor``), as a reference."""
    if href.startswith("#"):
        return reference("ref", f"{text} <{href[1:]}>", chapter) if href[1:] in chapter.book.targets else text
    page, _, anchor = href.partition("#")
    doc = _doc_label(page, chapter)
    if doc == chapter.doc or chapter.book.url is None:
        return text
    return f"[{text}]({chapter.book.url}/{doc}.html{'#' + anchor if anchor else ''})"


def convert_role(role: str, content: str, chapter: Chapter) -> str:
    """One ``{role}`content``` as plain Markdown."""
    if role in GLUE_ROLES:
        return glued(content, chapter)
    if role == "cite" or role.startswith("cite:"):
        return cite(role, content, chapter.book)
    if role in ("ref", "numref", "prf:ref", "doc", "any", "eq", "exercise", "solution"):
        return f"({content})" if role == "eq" else reference(role, content, chapter)
    if role == "math":
        return f"${content}$"
    if role in ("sub", "sup"):
        return f"<{role}>{content}</{role}>"
    return _explicit(content)[0] or _explicit(content)[1]  # abbr, term, kbd, ...: the text itself


def glued(content: str, chapter: Chapter) -> str:
    """A ``{glue:text}`name:fmt``` value as myst-nb renders it, from the executed build's values."""
    key, _, spec = content.strip().partition(":")
    if key not in chapter.values:
        raise ValueError(f"glued value {key!r} of {chapter.doc} is not known: build the book "
                         "(bash scripts/build.sh), which fills the notebooks' values in")
    return format_plain_text(chapter.values[key], spec or "s")


def convert_inline(text: str, chapter: Chapter) -> str:
    """Replace every role of a run of Markdown lines; code spans are left as they are."""
    def one(m: re.Match) -> str:
        if m["code"]:
            return m[0]
        if m["href"]:
            return markdown_link(m["text"], m["href"], chapter)
        out = convert_role(m["role"], m["content"], chapter)
        before = m.string[:m.start()].rstrip()
        return out[:1].upper() + out[1:] if (not before or before.endswith((".", "!", "?"))) else out

    return INLINE.sub(one, text)


# --------------------------------------------------------------------------------------------------- directives
def quote(title: str, body: str) -> str:
    """A Markdown block quote opening with a bold title."""
    title = title if title.endswith((".", "?", "!", ":")) else f"{title}."
    lines = body.strip("\n").split("\n") if body.strip() else []
    head = f"**{title}**"
    if lines and not BLOCK_START.match(lines[0]):
        lines[0] = f"{head} {lines[0].strip()}"
    else:
        lines = [head, ""] + lines
    return "\n".join(f"> {line}" if line.strip() else ">" for line in lines)


def details(summary: str, body: str) -> str:
    """A collapsed HTML block; the blank lines let Jupyter and Colab render the Markdown inside."""
    return f"<details>\n<summary>{summary}</summary>\n\n{body.strip()}\n\n</details>"


def included(arg: str, options: dict[str, str], chapter: Chapter) -> str:
    """A ``literalinclude`` as a fenced code block: the file, or its ``:pyobject:`` (``Class.method`` too)."""
    path = (chapter.book.root / chapter.doc).parent / arg
    if not path.is_file():
        raise ValueError(f"literalinclude of a missing file {arg!r} in {chapter.doc}")
    text = path.read_text(encoding="utf-8")
    if name := options.get("pyobject"):
        node: ast.AST = ast.parse(text)
        for part in name.split("."):
            node = next((n for n in getattr(node, "body", []) if getattr(n, "name", None) == part), None)
            if node is None:
                raise ValueError(f"no {name!r} in {arg} (literalinclude in {chapter.doc})")
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        text = textwrap.dedent("\n".join(text.splitlines()[start - 1:node.end_lineno]))
    return f"```{options.get('language', 'python')}\n{text.rstrip()}\n```"


def render_directive(name: str, arg: str, options: dict[str, str], body: str, chapter: Chapter) -> str:
    """A converted directive (``body`` is already converted)."""
    label = options.get("label") or options.get("name")
    if label:
        chapter.seen.add(label)
    if name.startswith("prf:"):
        return quote(prf_heading(name, arg), body)
    if name in ("exercise", "exercise-start"):
        chapter.exercises += 1
        title = exercise_title(arg, chapter.book.numbers.get(chapter.doc), chapter.exercises)
        return quote(title, body) + f"\n\n{STUDENT}"
    if name == "solution":
        return ""  # the student edition: answers only in the instructor edition
    if name in ("glue:figure", "glue", "glue:any", "glue:math", "glue:md", "figure"):
        caption = " ".join(body.split())
        shown = f"*Figure above: {caption}*" if caption and "*" not in caption else caption
        if name == "figure":
            return f"![{caption}]({arg})" + (f"\n\n{shown}" if caption else "")
        return shown if name == "glue:figure" else ""  # the cell that glued it shows it in a notebook
    if name == "dropdown":
        return details(arg or "Details", body)
    if name in ADMONITIONS:
        title = arg if name == "admonition" and arg else (arg or name.capitalize())
        return quote(title if name != "seealso" else "See also", body)
    if name in ("math", "equation"):
        return f"$$\n{body.strip()}\n$$"
    if name == "literalinclude":
        return included(arg, options, chapter)
    if name in ("code-block", "code", "sourcecode"):
        return f"```{arg}\n{body.strip(chr(10))}\n```"
    if name == "exercise-end":
        return ""
    return quote(arg or name.replace("-", " ").capitalize(), body)


# ------------------------------------------------------------------------------------------------------- cells
def convert_text(text: str, chapter: Chapter, top: bool = True) -> str:
    """Convert one Markdown cell (or a directive's content when ``top`` is false). What lies between
    ``solution-start`` and ``solution-end`` is left out (``chapter.in_solution`` carries it across cells)."""
    lines = text.split("\n")
    out: list[str] = []
    run: list[str] = []

    def emit(piece: str) -> None:
        if not (top and chapter.in_solution):
            out.append(piece)

    def flush() -> None:
        if run:
            emit(convert_inline("\n".join(run), chapter))
            run.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if (m := OPEN.match(line)) is not None:
            flush()
            end = find_close(lines, i, m["fence"])
            indent = indentation(line)
            options, content = split_options(unindent(lines[i + 1:end], indent))
            name = m["name"]
            if top and name in ("solution-start", "solution-end"):
                chapter.in_solution = name == "solution-start"
            elif not (top and chapter.in_solution):
                body = convert_text("\n".join(content), chapter, top=False)
                emit(reindent(render_directive(name, m["arg"], options, body, chapter), indent))
            i = end + 1
        elif (m := PLAIN_FENCE.match(line)) is not None:
            flush()
            end = find_close(lines, i, m["fence"])
            emit("\n".join(lines[i:end + 1]))
            i = end + 1
        elif LABEL_LINE.match(line):
            flush()
            i += 1
        else:
            run.append(line)
            i += 1
    flush()
    result = expand_macros("\n".join(out), chapter.book.macros) if top else "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", result).strip("\n")


def convert_cells(cells: list, doc: str, book: Book, values: dict[str, str] | None = None) -> None:
    """Convert the Markdown cells of a chapter notebook in place: plain Markdown, glued ``values`` filled in, an
    empty code cell after every exercise (unless a lab step's ``lab-answer`` cell follows it), and every
    solution, its code cells included, left out."""
    import nbformat

    chapter = Chapter(doc, book, values=dict(values or {}))
    out = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            cell.source = convert_text(cell.source, chapter)
            first, *rest = cell.source.split(STUDENT)
            cell.source = first.strip("\n")
            out.append(cell)
            after = cells[i + 1] if i + 1 < len(cells) else None
            own = after is not None and "lab-answer" in after.metadata.get("tags", [])
            for j, piece in enumerate(rest):
                if not (own and j == len(rest) - 1 and not piece.strip()):
                    answer = nbformat.v4.new_code_cell("# Your answer here\n")
                    answer.metadata["tags"] = ["exercise-answer"]
                    out.append(answer)
                out.append(nbformat.v4.new_markdown_cell(piece.strip("\n")))
        elif not (cell.cell_type == "code" and chapter.in_solution):
            out.append(cell)
    cells[:] = out


# ------------------------------------------------------------------------------ the notebook's first screen
TITLE = "#@title "  # Colab shows a code cell whose first line this is as its title, the code collapsed


def run_time(seconds: float | None) -> str:
    """The build's execution time of a chapter in words: "under a minute", "about 3 minutes"."""
    if seconds is None:
        return ""
    if seconds < 60:
        return "under a minute"
    n = math.ceil(seconds / 60)
    return f"about {n} minute{'s' if n > 1 else ''}"


def first_cell(seconds: float | None) -> str:
    """The Markdown of a notebook's first cell: what to run, how long it took in the book's build (``seconds``:
    the build's measured execution time of the chapter, ``None`` when no build has timed it), and where the
    numbers of the text come from."""
    took = (f"In its `quick` profile (the default) the chapter's cells ran in {run_time(seconds)} when the web "
            "book was built, on a two-core CPU like Colab's CPU runtime; the setup cell adds the time to clone "
            "the book and install `hoplib`.") if seconds is not None else \
        "The book's build has not timed this chapter yet."
    return ("> **How to run this notebook.** *Runtime → Run all* runs it top to bottom. " + took + " For the "
            "paper's sizes, choose a GPU runtime and set `profile = \"paper\"` in the parameters cell.\n>\n"
            "> **Numbers.** The numbers in the text come from the web book's build; the cells print this run's, "
            "which can differ (another CPU or a GPU, other library versions).")


def collapse(cell, title: str) -> None:
    """Show a code cell collapsed, by its title: Colab's form view (a ``#@title`` first line and ``cellView:
    form``) and Jupyter's hidden source. The code still runs."""
    if not cell.source.startswith(TITLE):
        cell.source = f"{TITLE}{title}\n{cell.source}"
    cell.metadata["cellView"] = "form"
    cell.metadata.setdefault("jupyter", {})["source_hidden"] = True


def untitled(source: str) -> str:
    """A code cell's source without the ``#@title`` line :func:`collapse` put first."""
    return source.split("\n", 1)[1] if source.startswith(TITLE) and "\n" in source else source
