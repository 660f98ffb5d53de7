"""Figures shared by the chapters (matplotlib only; each function draws on an ``Axes`` it is given or makes).

:func:`use_book_style` is the book's one figure style, applied by :func:`hoplib._book.notebook.start`: font
sizes readable at the page's width and SVG output (``$HOPLIB_FIGURE_FORMAT=png``: 200-dpi PNG, e.g. for the
PDF); :func:`check_legible` checks every figure the book shows against that width.
"""

from __future__ import annotations

import os

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch
from matplotlib.text import Text

from hoplib.tasks import find, letters_to_str
from hoplib.validate import check_choice, check_int

BOOK_STYLE = {
    "figure.dpi": 110, "savefig.dpi": 200,
    "font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10, "ytick.labelsize": 10,
    "legend.fontsize": 10, "legend.framealpha": 0.85, "axes.spines.top": False, "axes.spines.right": False,
    "image.cmap": "viridis", "svg.fonttype": "path",
}
PAGE_WIDTH_PX = 688
"""Width in CSS pixels of the book page's content column, where figures are shown (sphinx-book-theme in a
1280 px window: a code cell's box spans 688 px, measured on a screenshot)."""
MIN_TEXT_PX = 10.0
"""The smallest text height, in CSS pixels at :data:`PAGE_WIDTH_PX`, that :func:`check_legible` accepts."""


def use_book_style(figure_format: str | None = None) -> str:
    """Apply :data:`BOOK_STYLE` and, inside IPython, make inline figures ``figure_format`` (default
    ``$HOPLIB_FIGURE_FORMAT`` or ``"svg"``; ``"png"`` at 200 dpi); return the format."""
    fmt = check_choice("figure_format", figure_format or os.environ.get("HOPLIB_FIGURE_FORMAT", "svg"),
                       ("svg", "png"))
    mpl.rcParams.update(BOOK_STYLE)
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # pragma: no cover - plain Python without IPython
        return fmt
    shell = get_ipython()
    if shell is not None:
        set_matplotlib_formats(fmt)
        formatter = shell.display_formatter.formatters["image/svg+xml" if fmt == "svg" else "image/png"]
        formatter.for_type(Figure, _checked(formatter.lookup_by_type(Figure)))
    return fmt


def _checked(show):
    """``show`` (IPython's printer of a figure) after :func:`warn_if_illegible`: every figure a notebook shows
    (``plt.show()``, the end of a cell, ``display``, ``glue``) is checked."""
    def checked(fig: Figure, *args, **kwargs):
        warn_if_illegible(fig)
        return show(fig, *args, **kwargs)
    return checked


def warn_if_illegible(fig: Figure) -> str | None:
    """One ``hoplib: figure ... is not legible`` line on stderr when :func:`check_legible` rejects ``fig`` (the
    book build turns stderr into a warning, and warnings into errors); return the line."""
    import sys

    try:
        check_legible(fig)
    except ValueError as err:
        line = f"hoplib: a figure is not legible: {err}"
        print(line, file=sys.stderr)
        return line
    return None


def _visible_texts(artist) -> list[Text]:
    """Every visible, non-empty :class:`~matplotlib.text.Text` below ``artist``, pruning invisible subtrees."""
    if not artist.get_visible():
        return []
    found = [artist] if isinstance(artist, Text) and artist.get_text().strip() else []
    hidden_axes = isinstance(artist, Axes) and not artist.axison  # ax.axis("off") hides ticks and labels
    for child in artist.get_children():
        if not (hidden_axes and isinstance(child, mpl.axis.Axis)):
            found += _visible_texts(child)
    return found


def text_sizes_px(fig: Figure, page_px: int = PAGE_WIDTH_PX) -> list[tuple[float, str]]:
    """``(height in CSS px, text)`` of every visible text of ``fig`` when the notebook's image of it (tight
    bounding box, as Jupyter saves it) is shown at most ``page_px`` wide; smallest first.

    A point is 96/72 CSS pixels; a figure wider than the page is scaled down to fit it."""
    fig.draw_without_rendering()  # tick labels get their text at draw time
    width_in = fig.get_tightbbox().width + 0.2  # Jupyter saves with bbox_inches="tight", pad 0.1 in
    scale = min(1.0, page_px / (width_in * 96))
    sizes = [(t.get_fontsize() * 96 / 72 * scale, t.get_text()) for t in _visible_texts(fig)]
    return sorted(sizes, key=lambda pair: pair[0])


def check_legible(fig: Figure, *, min_px: float = MIN_TEXT_PX, page_px: int = PAGE_WIDTH_PX) -> float:
    """Raise ``ValueError`` naming the texts of ``fig`` smaller than ``min_px`` CSS pixels at the page's width
    (:func:`text_sizes_px`); return the smallest size. The book calls it on every figure it shows."""
    sizes = text_sizes_px(fig, page_px)
    small = [(round(float(px), 1), text[:30]) for px, text in sizes if px < min_px]
    if small:
        raise ValueError(f"{len(small)} texts below {min_px} px at {page_px} px page width "
                         f"(figure {fig.get_figwidth():.1f} in wide): {small[:6]}")
    return sizes[0][0] if sizes else float("inf")


def plot_pointer_chain(x: np.ndarray, i: int, k: int, ax: Axes | None = None) -> Axes:
    """Draw a sequence of letters, every find¹ pointer as a thin arc, and the k-hop chain from position i.

    The chain i -> find(i) -> find²(i) -> ... is drawn in colour with hop numbers; the answer hop_k(x)_i is
    the letter at the chain's end (boxed), or ⊥ if the chain falls off the left end.
    """
    x = np.asarray(x)
    n = len(x)
    i = check_int("i", i, low=0, high=n - 1)
    k = check_int("k", k, low=0)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 0.45 * n), 2.6))
    f = find(x)
    text = letters_to_str(x)
    for p, c in enumerate(text):
        ax.text(p, 0, c, ha="center", va="center", fontsize=13, family="monospace")
        ax.text(p, -0.55, str(p), ha="center", va="center", fontsize=9, color="grey")
    for p in range(n):
        if f[p] >= 0:
            ax.add_patch(FancyArrowPatch((p, 0.25), (f[p], 0.25), connectionstyle="arc3,rad=0.5",
                                         arrowstyle="-|>", mutation_scale=6, color="0.8", lw=0.6))
    p, colours = i, plt.get_cmap("viridis")
    for h in range(k):
        q = int(f[p])
        if q < 0:
            ax.text(p - 0.6, 0.45, f"⊥ at hop {h + 1}", color="crimson", fontsize=9, ha="right")
            break
        ax.add_patch(FancyArrowPatch((p, 0.3), (q, 0.3), connectionstyle="arc3,rad=0.55", arrowstyle="-|>",
                                     mutation_scale=10, color=colours(h / max(k, 1)), lw=2))
        ax.text((p + q) / 2, 0.35 + 0.28 * (p - q) / 2 * 0.5, f"hop {h + 1}", fontsize=9, ha="center",
                color=colours(h / max(k, 1)))
        p = q
    else:
        ax.add_patch(plt.Rectangle((p - 0.4, -0.3), 0.8, 0.6, fill=False, ec="crimson", lw=1.5))
    ax.add_patch(plt.Rectangle((i - 0.4, -0.3), 0.8, 0.6, fill=False, ec="black", lw=1, ls="--"))
    ax.set_xlim(-1, n)
    ax.set_ylim(-0.8, 0.4 + 0.14 * n)
    ax.axis("off")
    return ax


def plot_best_pattern(table: dict, ax: Axes | None = None, *, title: str = "", fade: bool = True) -> Axes:
    """The paper's Figures 14-15 from :func:`hoplib.evaluate.best_find_per_head` (or the training chapter's
    noise-floor reading): one row per (layer, head), one column per k; each cell names the
    best pattern (j of find^j, ``p`` previous token, ``s`` start) above its score, blank where ``best`` is -1.
    Colours code j (viridis), previous token (red) and start (grey); ``fade`` pales a cell as its score falls."""
    if not isinstance(table, dict) or not {"ks", "patterns", "best", "best_score"} <= set(table):
        raise TypeError("table must be the dict returned by hoplib.evaluate.best_find_per_head")
    names, ks = table["patterns"], table["ks"]
    best, score = np.asarray(table["best"]), np.asarray(table["best_score"], dtype=float)
    n_layers, n_heads, n_k = best.shape
    j_max = max((int(n.split("^")[1]) for n in names if n.startswith("find^")), default=1) or 1
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * n_k + 1.5, 0.32 * n_layers * n_heads + 1))
    img = np.ones((n_layers * n_heads, n_k, 3))
    for (layer, head, c), b in np.ndenumerate(best):
        if b < 0:
            continue
        name, s, r = names[b], score[layer, head, c], layer * n_heads + head
        j = int(name.split("^")[1]) if name.startswith("find^") else None
        colour = plt.get_cmap("viridis")(j / j_max)[:3] if j is not None else (
            (0.85, 0.3, 0.3) if name == "prev" else (0.6, 0.6, 0.6))
        w = min(max(s, 0.0), 1.0) if fade else 1.0
        img[r, c] = w * np.array(colour) + (1 - w)
        dark = w > 0.55 and j is not None and j < 0.6 * j_max
        ax.text(c, r, f"{name[0] if j is None else j}\n{s:.2f}".replace("0.", ".").replace("1.00", "1"),
                ha="center", va="center", fontsize=9, color="white" if dark else "black", linespacing=0.9)
    ax.imshow(img, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(n_k), [str(k) for k in ks], fontsize=9)
    ax.set_yticks(range(n_layers * n_heads),
                  [f"L{layer + 1} h{head + 1}" for layer in range(n_layers) for head in range(n_heads)], fontsize=9)
    for layer in range(1, n_layers):
        ax.axhline(layer * n_heads - 0.5, color="black", lw=0.8)
    ax.set(xlabel="k (hops of the input)", title=title)
    return ax
