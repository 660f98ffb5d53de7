"""Tests of hoplib.plots: the book's figure style and the legibility check."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import pytest

from hoplib import plots


def test_book_style_sets_readable_fonts_and_checks_the_format(monkeypatch):
    monkeypatch.delenv("HOPLIB_FIGURE_FORMAT", raising=False)
    with mpl.rc_context():
        assert plots.use_book_style() == "svg"
        assert mpl.rcParams["font.size"] >= 10 and mpl.rcParams["savefig.dpi"] >= 150
        monkeypatch.setenv("HOPLIB_FIGURE_FORMAT", "png")
        assert plots.use_book_style() == "png"
        with pytest.raises(ValueError, match="figure_format"):
            plots.use_book_style("jpeg")


def _figure(width_in: float, fontsize: float, *, hidden_axis: bool = False):
    fig, ax = plt.subplots(figsize=(width_in, 3))
    ax.plot([0, 1], [0, 1])
    ax.set_title("title", fontsize=fontsize)
    ax.tick_params(labelsize=fontsize)
    if hidden_axis:
        ax.axis("off")
    return fig


def test_text_sizes_shrink_with_figures_wider_than_the_page():
    narrow, wide = _figure(6, 10), _figure(16, 10)
    px_narrow = plots.text_sizes_px(narrow)[0][0]
    px_wide = plots.text_sizes_px(wide)[0][0]
    assert px_narrow == pytest.approx(10 * 96 / 72)  # 6 in fits the 688 px page unscaled
    assert px_wide < 0.65 * px_narrow  # ~16 in (less its margins) is shown at well under its size
    plt.close("all")


def test_check_legible_names_small_texts_and_ignores_hidden_ones():
    fig = _figure(6, 10)
    assert plots.check_legible(fig) >= plots.MIN_TEXT_PX
    with pytest.raises(ValueError, match="below"):
        plots.check_legible(_figure(16, 8))
    hidden = _figure(6, 10, hidden_axis=True)
    hidden.axes[0].tick_params(labelsize=2)  # invisible with the axis off
    assert plots.check_legible(hidden) >= plots.MIN_TEXT_PX
    plt.close("all")


def test_an_illegible_figure_gets_one_line_on_stderr(capsys):
    assert plots.warn_if_illegible(_figure(6, 10)) is None
    line = plots.warn_if_illegible(_figure(16, 8))
    assert line is not None and "not legible" in line and "below 10.0 px" in line
    assert capsys.readouterr().err.strip() == line
    plt.close("all")


def test_every_figure_a_notebook_shows_is_checked_as_it_is_shown(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        plots.use_book_style()
        formatter = shell.display_formatter.formatters["image/svg+xml"]
        assert "<svg" in formatter(_figure(6, 10))
        assert capsys.readouterr().err == ""
        formatter(_figure(16, 8))  # what plt.show(), display() and the end of a cell call
        assert "not legible" in capsys.readouterr().err
    finally:
        InteractiveShell.clear_instance()
        plt.close("all")


def test_every_page_that_shows_a_figure_sets_the_book_style_that_checks_it():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    pages = [*root.glob("*.md"), *(root / "chapters").rglob("*.md")]
    showing = [p for p in pages if "plt.show()" in (text := p.read_text()) or "plt.subplots(" in text]
    assert len(showing) >= 10
    for page in showing:
        text = page.read_text()
        assert "use_book_style()" in text or "nb.start(" in text, page.name
