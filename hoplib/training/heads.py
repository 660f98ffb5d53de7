"""What the heads of a trained model attend to, read against a noise floor (Appendix G.4 of the paper).

A head that spreads its attention over recent positions scores well against find^j (which points only a few
positions back) without computing anything. The floor of an input-dependent pattern (find^j, j >= 1) is the
score of the head's own attention against the pattern of a *different* input of the batch (a derangement of
the samples): it keeps the head's positional habits and cuts the link to the pointers. For a pattern that does
not depend on the input ("prev", "start", find^0) the floor is the score of uniform causal attention. A score
*clears* its floor when it exceeds it by at least ``min_lift``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from hoplib._book.device import get_device
from hoplib.evaluate import alignment_score, attention_maps, find_pattern
from hoplib.tasks import HopTask


def derangements(n: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """``count`` random permutations of ``range(n)`` without fixed points (n >= 2), reproducible from ``seed``."""
    if n < 2:  # one sample has no derangement: the loop below would never end
        raise ValueError(f"n must be >= 2 to derange, got {n}")
    gen = torch.Generator().manual_seed(seed)
    out = []
    while len(out) < count:
        p = torch.randperm(n, generator=gen)
        if not bool((p == torch.arange(n)).any()):
            out.append(p)
    return out


def uniform_causal(t: int) -> torch.Tensor:
    """The (T, T) attention map of a head that attends equally to every position up to its own."""
    m = torch.tril(torch.ones(t, t))
    return m / m.sum(dim=1, keepdim=True)


def _as_heads(att: torch.Tensor) -> torch.Tensor:
    return (att.unsqueeze(1) if att.ndim == 3 else att).float().cpu()


def alignment_with_floor(atts: Sequence[torch.Tensor], inputs: torch.Tensor, task: HopTask,
                         patterns: Iterable[int | str], *, n_shuffles: int = 20, seed: int = 0,
                         quantile: float = 0.95) -> dict[str, Any]:
    """Scores of every layer's heads against each pattern, and their noise floors (see the module doc).

    ``atts`` holds one attention tensor per layer, (B, H, T, T) or (B, T, T), rows = queries, computed on
    ``inputs`` (B, T) of ``task``. The floor of an input-dependent pattern is the ``quantile`` over
    ``n_shuffles`` derangements of the sample-averaged shuffled score. Returns ``{"patterns": names,
    "scores": (L, H, P), "floor": (L, H, P)}``, layers and heads in order (layer 1 first).
    """
    atts, x = [_as_heads(a) for a in atts], inputs.cpu()
    names = [j if isinstance(j, str) else f"find^{j}" for j in patterns]
    pats = [find_pattern(x, task, j) for j in patterns]
    perms = derangements(x.shape[0], n_shuffles, seed)
    uniform = uniform_causal(x.shape[1])
    scores, floors = [], []
    for att in atts:
        s_layer, f_layer = [], []
        for p in pats:
            s_layer.append(alignment_score(att, p.unsqueeze(1)).mean(0))
            if bool((p == p[:1]).all()):  # the pattern does not depend on the input
                f_layer.append(alignment_score(uniform.unsqueeze(0), p[:1]).expand(att.shape[1]))
            else:
                shuffled = torch.stack([alignment_score(att, p[q].unsqueeze(1)).mean(0) for q in perms])
                f_layer.append(torch.quantile(shuffled, quantile, dim=0))
        scores.append(torch.stack(s_layer, dim=-1))
        floors.append(torch.stack(f_layer, dim=-1))
    return {"patterns": names, "scores": torch.stack(scores), "floor": torch.stack(floors)}


def head_alignment(model: nn.Module, task: HopTask, *, ks: Iterable[int], patterns: Iterable[int | str],
                   n_samples: int = 10, seed: int = 0, n_shuffles: int = 20,
                   device: str | torch.device = "cpu") -> dict[str, Any]:
    """:func:`alignment_with_floor` of ``model`` for each hop count k of ``ks`` (samples of hop_k drawn with
    ``task.sample(n_samples, k=k, seed=seed + k)``, as :func:`hoplib.evaluate.alignment_scores` does).
    Returns ``{"ks", "patterns", "scores": (L, H, K, P), "floor": (L, H, K, P)}``."""
    ks, patterns = list(ks), list(patterns)
    dev = get_device(device)
    per_k = []
    for k in ks:
        x, _ = task.sample(n_samples, k=k, seed=seed + k, device=dev)
        atts = [_as_heads(a) for a in attention_maps(model, x)]
        per_k.append(alignment_with_floor(atts, x, task, patterns, n_shuffles=n_shuffles, seed=seed + k))
    return {"ks": ks, "patterns": per_k[0]["patterns"],
            "scores": torch.stack([a["scores"] for a in per_k], dim=2),
            "floor": torch.stack([a["floor"] for a in per_k], dim=2)}


def cleared(table: dict[str, Any], min_lift: float = 0.1) -> dict[str, Any]:
    """For every (layer, head, k): the pattern with the largest lift (score minus floor) among those that clear
    their floor by at least ``min_lift``, or none. Returns ``{"best": long (L, H, K), -1 where nothing clears;
    "lift": (L, H, K); "score": (L, H, K)}`` beside the inputs' ``ks`` and ``patterns``."""
    lift = table["scores"] - table["floor"]
    masked = torch.where(lift >= min_lift, lift, torch.full_like(lift, -np.inf))
    top, best = masked.max(dim=-1)
    best = torch.where(torch.isfinite(top), best, torch.full_like(best, -1))
    score = table["scores"].gather(-1, best.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return {"ks": table["ks"], "patterns": table["patterns"], "best": best,
            "lift": torch.where(best >= 0, top, torch.zeros_like(top)),
            "score": torch.where(best >= 0, score, torch.zeros_like(score))}


def content_summary(table: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer (1-based): the highest score against an input-dependent pattern (find^j, j >= 1) over heads
    and k, the floor of that same cell, and the largest lift (score minus floor) of any such cell. A score that
    sits on its floor is what a head scores by its positional habits alone."""
    idx = [i for i, n in enumerate(table["patterns"]) if n.startswith("find^") and n != "find^0"]
    out = []
    for layer in range(table["scores"].shape[0]):
        s, f = table["scores"][layer][..., idx], table["floor"][layer][..., idx]
        flat = int(s.argmax())
        out.append({"layer": layer + 1, "score": float(s.flatten()[flat]), "floor": float(f.flatten()[flat]),
                    "max_lift": float((s - f).max())})
    return out


def roles(reading: dict[str, Any]) -> dict[tuple[int, int], dict[str, list[int]]]:
    """``{(layer, head): {pattern: [k, ...]}}`` (1-based layer and head) of the cells of :func:`cleared`."""
    names, ks, best = reading["patterns"], reading["ks"], reading["best"]
    out: dict[tuple[int, int], dict[str, list[int]]] = {}
    for layer in range(best.shape[0]):
        for head in range(best.shape[1]):
            cells: dict[str, list[int]] = {}
            for c, b in enumerate(best[layer, head].tolist()):
                if b >= 0:
                    cells.setdefault(names[b], []).append(ks[c])
            out[(layer + 1, head + 1)] = cells
    return out


def plot_cleared(reading: dict[str, Any], ax=None, *, title: str = ""):
    """The paper's Figures 14-15 with a noise floor: one row per (layer, head) (1-based), one column per k;
    each cell names the pattern of :func:`cleared` (j of find^j, ``p`` previous token, ``s`` start) over its
    score, and stays blank where no pattern clears its floor. Returns the axes."""
    import matplotlib.pyplot as plt

    names, ks, best = reading["patterns"], reading["ks"], reading["best"].numpy()
    n_layers, n_heads, n_k = best.shape
    palette = plt.get_cmap("tab10")
    colour = {n: (palette(int(n.split("^")[1]) % 10)[:3] if n.startswith("find^")
                  else (0.8, 0.8, 0.8) if n == "start" else (0.95, 0.85, 0.3)) for n in names}
    if ax is None:
        _, ax = plt.subplots(figsize=(0.75 * n_k + 2, 0.4 * n_layers * n_heads + 1))
    img = np.ones((n_layers * n_heads, n_k, 3))
    for (layer, head, c), b in np.ndenumerate(best):
        if b < 0:
            continue
        r, name = layer * n_heads + head, names[b]
        img[r, c] = 0.45 + 0.55 * np.array(colour[name])
        label = "j=" + name.split("^")[1] if name.startswith("find^") else name
        ax.text(c, r, f"{label}\n{float(reading['score'][layer, head, c]):.2f}", ha="center", va="center",
                fontsize=8, linespacing=0.9)
    ax.imshow(img, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(n_k), [str(k) for k in ks], fontsize=9)
    ax.set_yticks(range(n_layers * n_heads), [f"layer {a + 1} head {h + 1}" for a in range(n_layers)
                                              for h in range(n_heads)], fontsize=8)
    for layer in range(1, n_layers):
        ax.axhline(layer * n_heads - 0.5, color="black", lw=0.8)
    ax.set_xlabel("k (hops of the input)", fontsize=10)
    if title:
        ax.set_title(title, fontsize=10)
    return ax
