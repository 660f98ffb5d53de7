"""Tests of hoplib.plots: the book's figure style and the shared axis helpers."""

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


def test_integer_ticks_leave_no_fractional_tick():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [0.1, 0.5, 0.2])
    plots.integer_ticks(ax)
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_xticks())
    with pytest.raises(ValueError, match="axis"):
        plots.integer_ticks(ax, "z")
    plt.close(fig)


def test_layers_are_named_from_one():
    assert plots.layer_label(0) == "layer 1" and plots.layer_label(2) == "layer 3"
    with pytest.raises(ValueError):
        plots.layer_label(-1)
