"""Figures shared by the chapters (matplotlib only; each function draws on an ``Axes`` it is given or makes)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch

from hoplib._validate import check_int
from hoplib.tasks import find, letters_to_str


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
        ax.text(p, -0.55, str(p), ha="center", va="center", fontsize=7, color="grey")
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
        ax.text((p + q) / 2, 0.35 + 0.28 * (p - q) / 2 * 0.5, f"hop {h + 1}", fontsize=7, ha="center",
                color=colours(h / max(k, 1)))
        p = q
    else:
        ax.add_patch(plt.Rectangle((p - 0.4, -0.3), 0.8, 0.6, fill=False, ec="crimson", lw=1.5))
    ax.add_patch(plt.Rectangle((i - 0.4, -0.3), 0.8, 0.6, fill=False, ec="black", lw=1, ls="--"))
    ax.set_xlim(-1, n)
    ax.set_ylim(-0.8, 0.4 + 0.14 * n)
    ax.axis("off")
    return ax


def plot_hop_statistics(records: list[dict[str, float]], axes: tuple[Axes, Axes] | None = None) -> tuple[Axes, Axes]:
    """Two panels from :func:`hoplib.tasks.hop_statistics`: share of ⊥ targets, and hop distance, against k."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    ks = [r["k"] for r in records]
    axes[0].plot(ks, [r["no_answer_share"] for r in records], "o-")
    axes[0].set(xlabel="k (hops)", ylabel="share of ⊥ targets", ylim=(0, 1))
    axes[1].plot(ks, [r["mean_distance"] for r in records], "o-", label="mean")
    axes[1].plot(ks, [r["max_distance"] for r in records], "s--", label="max")
    axes[1].set(xlabel="k (hops)", ylabel="i − find^k(i) (positions back)")
    axes[1].legend()
    for a in axes:
        a.grid(alpha=0.3)
    return axes
