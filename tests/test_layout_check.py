"""scripts/layout_check.py finds what a reader would see cut off, and the book's stylesheet and script
(_static/hoplib.css, hoplib.js) leave it nothing to find: every box that scrolls sideways shows a cue, figures fit
a phone. Needs headless Chromium (Debian: apt-get install chromium); skipped without it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import layout_check  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="needs headless Chromium")

WIDE = '<td style="white-space:nowrap">{}</td>'.format("x" * 120)


def test_it_finds_cut_clipped_and_cueless_overflow_but_not_a_cued_scroll_or_what_fits(tmp_path):
    (tmp_path / "page.html").write_text(
        '<html><body><div class="bd-article" style="width:300px">'
        f'<table class="cut"><tr>{WIDE}</tr></table>'
        f'<div class="bare" style="overflow-x:auto"><table><tr>{WIDE}</tr></table></div>'
        f'<div class="cued" style="overflow-x:auto;-webkit-mask-image:linear-gradient(to right,#000 80%,'
        f'transparent);mask-image:linear-gradient(to right,#000 80%,transparent)"><table><tr>{WIDE}</tr></table>'
        '</div>'
        f'<div class="hides" style="overflow-x:hidden"><pre>{"y" * 120}</pre></div>'
        '<div class="fits" style="overflow-x:auto"><table><tr><td>short</td></tr></table></div>'
        "</div></body></html>")
    found = layout_check.check(tmp_path / "page.html", 390)
    assert [f.split(" shows")[0].split(" right")[0] for f in sorted(found)] == [
        "clipped: div.hides", "cut: table.cut", "no scroll cue: div.bare"], found
    assert not list(tmp_path.glob(".layout-*")), "the probe and frame copies are removed"


def test_a_phone_width_is_measured_as_the_phones(tmp_path):
    """Headless Chromium's window is at least 500 px wide; the page must still be laid out at 390."""
    (tmp_path / "page.html").write_text(
        '<html><body style="margin:0"><div class="bd-article">'
        '<div style="width:450px;overflow-x:auto"><p>450 px of text</p></div></div></body></html>')
    assert layout_check.check(tmp_path / "page.html", 1280) == []
    assert [f.split(" right")[0] for f in layout_check.check(tmp_path / "page.html", 390)] == ["cut: div."]


BOOK_PAGE = """<html><head>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>pre {{ overflow: auto }} figure {{ margin: 0 }} .bd-article {{ max-width: 688px; margin: 0 16px }}
{extra}</style>
{assets}</head><body><div class="bd-article">
<div class="cell_output"><div class="output text_html"><table class="dataframe"><thead><tr>{heads}</tr></thead>
<tbody><tr>{cells}</tr></tbody></table></div></div>
<div class="highlight"><pre>{code}</pre></div>
<figure><img src="figure.svg"/><figcaption>A figure drawn 688 px wide.</figcaption></figure>
</div></body></html>"""
FIGURE = ('<svg xmlns="http://www.w3.org/2000/svg" width="688" height="300"><rect width="688" height="300" '
          'fill="#eee"/><text x="600" y="150" font-size="14">legend</text></svg>')


def book_page(tmp_path: Path, script: bool = True, extra_css: str = "") -> Path:
    """A page shaped like the built book's, with the book's stylesheet (and script): a wide printed table, a long
    code line and a figure drawn 688 px wide."""
    (tmp_path / "_static").mkdir(exist_ok=True)
    for name in ("hoplib.css", "hoplib.js"):
        shutil.copy(ROOT / "_static" / name, tmp_path / "_static" / name)
    (tmp_path / "figure.svg").write_text(FIGURE)
    assets = '<link rel="stylesheet" href="_static/hoplib.css">'
    assets += '<script src="_static/hoplib.js"></script>' if script else ""
    page = tmp_path / f"book-{script}.html"
    page.write_text(BOOK_PAGE.format(assets=assets, extra=extra_css,
                                     heads="".join(f"<th>column_{i}</th>" for i in range(14)),
                                     cells="".join(f"<td>{10 ** 6 + i}</td>" for i in range(14)),
                                     code="result = some_function(" + ", ".join(["argument"] * 7) + ")"))
    return page


def test_the_books_stylesheet_and_script_leave_no_finding_on_a_phone_or_a_desktop(tmp_path):
    book = book_page(tmp_path)
    assert layout_check.check(book, 390) == []
    assert layout_check.check(book, 1280) == []


# The rule for figures on phones before the scroll cue: kept at their drawn width in a box that scrolls.
SCROLLING_FIGURES = ("@media (max-width: 760px) { .bd-article figure { overflow-x: auto } "
                     ".bd-article figure img { max-width: 688px !important; width: auto } }")


def test_without_the_books_cue_wide_boxes_and_scrolling_phone_figures_are_found(tmp_path):
    found = layout_check.check(book_page(tmp_path, script=False, extra_css=SCROLLING_FIGURES), 390)
    boxes = sorted(f.split(" shows")[0] for f in found)
    assert boxes == ["no scroll cue: div.cell_output", "no scroll cue: figure.", "no scroll cue: pre."], found


def test_main_needs_a_built_book(tmp_path, capsys):
    assert layout_check.main([str(tmp_path / "nothing")]) == 2
    assert "no built book" in capsys.readouterr().err


BUILT = ROOT / "_build" / "html"
SAMPLE = ["intro.html", "teaching.html", "chapters/rnn.html", "chapters/stored_runs/closing.html"]


@pytest.mark.slow
@pytest.mark.skipif(not (BUILT / "intro.html").is_file(), reason="needs a built book (bash scripts/build.sh)")
@pytest.mark.parametrize("page", SAMPLE)
def test_the_built_books_pages_have_no_finding(page):
    """A sample of the built book (every page: python scripts/layout_check.py _build/html, some minutes)."""
    for width in (1280, 390):
        assert layout_check.check(BUILT / page, width) == [], f"{page} at {width} px"
