"""Checks of the built HTML book: what a reader would see as a rendering defect.

Run by ``scripts/build.sh`` after every build (``python scripts/html_check.py _build/html``). A page fails
on text that Sphinx or myst-nb left unrendered:

- a raw Markdown table (``| --- |`` rows shown as text, e.g. ``display(Markdown(...))`` output);
- a ``$`` outside math (a mis-paired ``$$`` or an inline formula that did not parse);
- MyST roles and directives shown as text: ``{glue``, ``{prf:``, ``{cite``, ``{ref}``, ``{doc}``, ``{numref}``;
- ``??``, which Sphinx prints for a cross reference it could not resolve;
- a figure without a caption: every image on a chapter page must sit in a ``<figure>`` with a
  ``<figcaption>`` (glued figures, ``{glue:figure}``), so no figure reaches the reader unexplained;
- a code or printed output line over ``MAX_COLUMNS`` characters (cells, quoted library code, commands): at
  1280 px the code column holds 84 (``_static/hoplib.css``), so a wider line needs a scrollbar and its end is
  cut off.

Code blocks, cell inputs and printed cell outputs (``<pre>``), and math are not scanned for text defects.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString, Tag

_SKIP_TAGS = {"pre", "code", "script", "style", "textarea", "kbd", "samp"}
_MATH_CLASSES = {"math", "MathJax", "MathJax_Preview", "MathJax_Display", "katex"}
_ROLES = re.compile(r"\{(glue|glue:text|glue:figure|prf:[a-z]+|cite(:[a-z]+)?|ref|doc|numref|eq)\}|\{glue")
_TABLE_RULE = re.compile(r"\|\s*:?-{3,}:?\s*\|")
_PAGES_WITHOUT_FIGURE_RULE = {"search.html", "genindex.html"}
MAX_COLUMNS = 84


@dataclass(frozen=True)
class Defect:
    """One rendering defect: the page (relative path), what kind, and a snippet of the text."""

    page: str
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}: {self.kind}: {self.text[:120]!r}"


def _skipped(node: Tag | NavigableString) -> bool:
    for parent in node.parents:
        if not isinstance(parent, Tag):
            continue
        if parent.name in _SKIP_TAGS:
            return True
        if _MATH_CLASSES & set(parent.get("class") or ()):
            return True
        if parent.get("role") == "navigation" or parent.name in ("nav", "header", "footer"):
            return True
    return False


def _main(soup: BeautifulSoup) -> Tag | BeautifulSoup:
    """The page's content, without the theme's navigation around it."""
    return soup.find("main") or soup.find("article") or soup


def _text_defects(soup: BeautifulSoup, page: str) -> list[Defect]:
    out = []
    main = _main(soup)
    for node in main.find_all(string=True):
        if not isinstance(node, NavigableString) or _skipped(node):
            continue
        text = str(node)
        if "$" in text:
            out.append(Defect(page, "unrendered $", text.strip()))
        if _ROLES.search(text):
            out.append(Defect(page, "unrendered MyST role", text.strip()))
        if "??" in text:
            out.append(Defect(page, "unresolved reference ??", text.strip()))
        if _TABLE_RULE.search(text):
            out.append(Defect(page, "raw Markdown table", text.strip()))
    return out


def _figure_defects(soup: BeautifulSoup, page: str) -> list[Defect]:
    out = []
    main = _main(soup)
    for img in main.find_all("img"):
        src = str(img.get("src", ""))
        if "logo" in " ".join(img.get("class") or ()) or "_static/" in src or _skipped(img):
            continue  # the theme's own images (logos, launch buttons), not the book's figures
        fig = img.find_parent("figure")
        if fig is None or fig.find("figcaption") is None or not fig.find("figcaption").get_text(strip=True):
            out.append(Defect(page, "figure without a caption", str(img.get("src", ""))))
    return out


def _width_defects(soup: BeautifulSoup, page: str) -> list[Defect]:
    out = []
    main = _main(soup)
    for pre in main.find_all("pre"):
        if "pre-wrap" in str(pre.get("style", "")):
            continue  # wraps at the page's width (provenance blocks)
        out += [Defect(page, f"code or output line over {MAX_COLUMNS} characters", line)
                for line in pre.get_text().splitlines() if len(line) > MAX_COLUMNS]
    return out


def check_page(path: str | Path, root: str | Path | None = None) -> list[Defect]:
    """The rendering defects of one built HTML page."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no HTML page at {path}")
    page = str(path.relative_to(root)) if root is not None else path.name
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    defects = _text_defects(soup, page) + _width_defects(soup, page)
    if path.name not in _PAGES_WITHOUT_FIGURE_RULE:
        defects += _figure_defects(soup, page)
    return defects


def check_book(html_dir: str | Path) -> list[Defect]:
    """The defects of every page of a built book (``_build/html``), skipping Sphinx's own folders."""
    html_dir = Path(html_dir)
    pages = [p for p in sorted(html_dir.rglob("*.html")) if not p.relative_to(html_dir).parts[0].startswith("_")]
    if not pages:
        raise FileNotFoundError(f"no built HTML pages under {html_dir}: build the book first")
    return [d for p in pages for d in check_page(p, html_dir)]


def main(argv: list[str] | None = None) -> int:
    """``python scripts/html_check.py [_build/html]``: print each defect, exit 1 if there are any."""
    args = sys.argv[1:] if argv is None else argv
    html_dir = Path(args[0] if args else "_build/html")
    try:
        defects = check_book(html_dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for d in defects:
        print(d)
    n_pages = sum(1 for _ in html_dir.rglob("*.html"))
    print(f"html check: {len(defects)} rendering defect(s) in {n_pages} page(s) under {html_dir}")
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
