"""What the heads of a trained model attend to, read against a noise floor (Appendix G.4 of the paper).

A head that spreads its attention over recent positions scores well against find^j without computing
anything. The floor of an input-dependent pattern (find^j, j >= 1) is the head's score against the pattern of
a *different* input of the batch (a derangement of the samples): it keeps the head's positional habits and
cuts the link to the pointers. A pattern that does not depend on the input ("prev", "start", find^0) has the
score of uniform causal attention as its floor. A score *clears* its floor when it exceeds it by ``min_lift``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn as nn

from hoplib._book.device import get_device
from hoplib.evaluate import alignment_score, attention_maps, find_pattern
from hoplib.tasks import HopTask


def derangements(n: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """``count`` random permutations of ``range(n)`` without fixed points (n >= 2), reproducible from ``seed``."""
    if n < 2:  # one sample has no derangement: the loop below would never end
        raise ValueError(f"n must be >= 2 to derange, got {n}")
    gen, out = torch.Generator().manual_seed(seed), []
    while len(out) < count:
        if not bool(((p := torch.randperm(n, generator=gen)) == torch.arange(n)).any()):
            out.append(p)
    return out


def uniform_causal(t: int) -> torch.Tensor:
    """The (T, T) attention map of a head that attends equally to every position up to its own."""
    m = torch.tril(torch.ones(t, t))
    return m / m.sum(dim=1, keepdim=True)


def alignment_with_floor(atts: Sequence[torch.Tensor], inputs: torch.Tensor,
                         task: HopTask, patterns: Iterable[int | str], *,
                         n_shuffles: int = 20, seed: int = 0,
                         quantile: float = 0.95) -> dict[str, Any]:
    """Scores of every layer's heads against each pattern, and their noise floors.

    ``atts``: one attention tensor per layer, (B, H, T, T) or (B, T, T), rows =
    queries, on ``inputs`` (B, T). The floor of an input-dependent pattern is the
    ``quantile`` over ``n_shuffles`` derangements of the mean shuffled score.
    Returns ``{"patterns", "scores": (L, H, P), "floor": (L, H, P)}``.
    """
    x = inputs.cpu()
    names = [j if isinstance(j, str) else f"find^{j}" for j in patterns]
    pats = [find_pattern(x, task, j) for j in patterns]
    perms = derangements(x.shape[0], n_shuffles, seed)
    uniform = uniform_causal(x.shape[1]).unsqueeze(0)
    scores, floors = [], []
    for att in atts:
        att = (att.unsqueeze(1) if att.ndim == 3 else att).float().cpu()
        s_layer, f_layer = [], []
        for p in pats:
            s_layer.append(alignment_score(att, p.unsqueeze(1)).mean(0))
            if bool((p == p[:1]).all()):  # a pattern that ignores the input
                f_layer.append(
                    alignment_score(uniform, p[:1]).expand(att.shape[1]))
            else:
                shuffled = torch.stack(
                    [alignment_score(att, p[q].unsqueeze(1)).mean(0)
                     for q in perms])
                f_layer.append(torch.quantile(shuffled, quantile, dim=0))
        scores.append(torch.stack(s_layer, dim=-1))
        floors.append(torch.stack(f_layer, dim=-1))
    return {"patterns": names, "scores": torch.stack(scores),
            "floor": torch.stack(floors)}


def head_alignment(model: nn.Module, task: HopTask, *, ks: Iterable[int], patterns: Iterable[int | str],
                   n_samples: int = 10, seed: int = 0, n_shuffles: int = 20,
                   device: str | torch.device = "cpu") -> dict[str, Any]:
    """:func:`alignment_with_floor` of ``model`` for each hop count k of ``ks``, on
    ``task.sample(n_samples, k=k, seed=seed + k)``. Returns ``{"ks", "patterns", "scores": (L, H, K, P),
    "floor": (L, H, K, P)}``."""
    ks, patterns, dev = list(ks), list(patterns), get_device(device)
    per_k = []
    for k in ks:
        x, _ = task.sample(n_samples, k=k, seed=seed + k, device=dev)
        per_k.append(alignment_with_floor(attention_maps(model, x), x, task, patterns, n_shuffles=n_shuffles,
                                          seed=seed + k))
    return {"ks": ks, "patterns": per_k[0]["patterns"],
            **{key: torch.stack([a[key] for a in per_k], dim=2) for key in ("scores", "floor")}}


def cleared(table: dict[str, Any], min_lift: float = 0.1) -> dict[str, Any]:
    """For every (layer, head, k): the pattern with the largest lift (score minus floor) among those that clear
    their floor by at least ``min_lift``. Returns ``{"best": long (L, H, K), -1 where nothing clears; "lift",
    "score": (L, H, K), 0 where nothing clears}`` beside the inputs' ``ks`` and ``patterns``."""
    lift = table["scores"] - table["floor"]
    top, best = torch.where(lift >= min_lift, lift, -torch.inf).max(dim=-1)
    found = torch.isfinite(top)
    score = table["scores"].gather(-1, best.unsqueeze(-1)).squeeze(-1)
    return {"ks": table["ks"], "patterns": table["patterns"], "best": torch.where(found, best, -1),
            "lift": torch.where(found, top, 0.0), "score": torch.where(found, score, 0.0)}


def content_summary(table: dict[str, Any]) -> list[dict[str, Any]]:
    """Per layer (1-based): the highest score against an input-dependent pattern (find^j, j >= 1) over heads
    and k, the floor of that same cell, and the largest lift of any such cell. A score that sits on its floor
    is what a head scores by its positional habits alone."""
    idx = [i for i, n in enumerate(table["patterns"]) if n.startswith("find^") and n != "find^0"]
    out = []
    for layer, (s, f) in enumerate(zip(table["scores"][..., idx], table["floor"][..., idx], strict=True)):
        flat = int(s.argmax())
        out.append({"layer": layer + 1, "score": float(s.flatten()[flat]), "floor": float(f.flatten()[flat]),
                    "max_lift": float((s - f).max())})
    return out


def roles(reading: dict[str, Any]) -> dict[tuple[int, int], dict[str, list[int]]]:
    """``{(layer, head): {pattern: [k, ...]}}`` (1-based layer and head) of the cells of :func:`cleared`."""
    names, ks, best = reading["patterns"], reading["ks"], reading["best"]
    out: dict[tuple[int, int], dict[str, list[int]]] = {
        (a + 1, h + 1): {} for a in range(best.shape[0]) for h in range(best.shape[1])}
    for a, h, c in (best >= 0).nonzero().tolist():
        out[(a + 1, h + 1)].setdefault(names[best[a, h, c]], []).append(ks[c])
    return out

def plot_cleared(reading: dict[str, Any], ax=None, *, title: str = ""):
    """The paper's Figures 14-15 with a noise floor: :func:`hoplib.plots.plot_best_pattern` of the patterns of
    :func:`cleared`, blank where no pattern clears its floor. Returns the axes."""
    from hoplib.plots import plot_best_pattern

    return plot_best_pattern({**reading, "best_score": reading["score"]}, ax, title=title, fade=False)
