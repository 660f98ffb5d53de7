"""Tests of scripts/html_check.py, the rendering check run on the built book."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import html_check  # noqa: E402

GOOD = """<html><body><main>
<p>Depth <span class="math notranslate nohighlight">\\(\\lfloor \\log_2 k \\rfloor + 2\\)</span> suffices.</p>
<div class="math notranslate nohighlight">\\[ x = $5 \\]</div>
<pre>print("$HOME | --- | {glue:text}`x` ??")</pre>
<figure><img src="a.png"/><figcaption><p>Error against k.</p></figcaption></figure>
<table><tr><td>1</td></tr></table>
<a class="btn"><img src="../_static/images/logo_colab.png"/></a>
</main></body></html>"""


def _page(tmp_path, body, name="page.html"):
    path = tmp_path / name
    path.write_text(body)
    return path


def test_a_clean_page_has_no_defects(tmp_path):
    assert html_check.check_page(_page(tmp_path, GOOD)) == []


@pytest.mark.parametrize(("snippet", "kind"), [
    ("<p>| k | error |</p><p>| --- | --- |</p>", "raw Markdown table"),
    ("<p>through layers $ with arbitrary functions</p>", "unrendered $"),
    ("<p>The depth is {glue:text}`depth`.</p>", "unrendered MyST role"),
    ("<p>see {prf:ref}`thm-x`</p>", "unrendered MyST role"),
    ("<p>as shown by {cite:p}`key`</p>", "unrendered MyST role"),
    ("<p>see <a href='#'>??</a></p>", "unresolved reference ??"),
    ("<div class='cell_output'><img src='b.png'/></div>", "figure without a caption"),
    ("<figure><img src='c.png'/><figcaption></figcaption></figure>", "figure without a caption"),
    ("<div class='cell_output'><pre>" + "x" * 85 + "</pre></div>", "code or output line over 84 characters"),
    ("<div class='highlight'><pre>" + "y" * 85 + "</pre></div>", "code or output line over 84 characters"),
])
def test_each_kind_of_defect_is_found(tmp_path, snippet, kind):
    page = _page(tmp_path, GOOD.replace("</main>", snippet + "</main>"))
    assert [d.kind for d in html_check.check_page(page)] == [kind]


def test_an_output_line_of_84_characters_fits(tmp_path):
    page = _page(tmp_path, GOOD.replace("</main>", f"<div class='cell_output'><pre>{'x' * 84}</pre></div></main>"))
    assert html_check.check_page(page) == []
    wrapped = f"<div class='cell_output'><pre style='white-space: pre-wrap'>{'x' * 200}</pre></div>"
    assert html_check.check_page(_page(tmp_path, GOOD.replace("</main>", wrapped + "</main>"))) == []


def test_check_book_scans_every_page_and_main_exits_1_on_defects(tmp_path, capsys):
    _page(tmp_path, GOOD, "a.html")
    (tmp_path / "chapters").mkdir()
    _page(tmp_path / "chapters", GOOD.replace("</main>", "<p>$x</p></main>"), "b.html")
    (tmp_path / "_static").mkdir()
    _page(tmp_path / "_static", "<main><p>$ignored</p></main>", "c.html")
    defects = html_check.check_book(tmp_path)
    assert [(d.page, d.kind) for d in defects] == [("chapters/b.html", "unrendered $")]
    assert html_check.main([str(tmp_path)]) == 1
    assert "1 rendering defect" in capsys.readouterr().out


def test_main_without_a_build_says_so_in_one_line(tmp_path, capsys):
    assert html_check.main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
