"""Test error per hop count k of a trained model, and what its heads attend to (Section 4.2, Appendix G).

Only letter targets count: ``"paper"`` is err^n_k (per sample the share wrong, averaged), ``"pooled"`` the
authors' code (pooled over samples). Test data for k has seed ``seed + k`` < 2**30, apart from training's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.nn as nn

from hoplib.device import autocast, get_device
from hoplib.report import METRICS
from hoplib.tasks import HopTask, find_k


def samples_per_k(task: HopTask, ks: Iterable[int] | None, n_samples: int, seed: int,
                  device: torch.device) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """``(k, inputs, targets)`` for each k (default all of the task's), from the test seeds."""
    if not 0 <= seed <= 2**30 - 1 - task.max_hops:  # above, test data would overlap the training streams
        raise ValueError(f"seed must be in 0..{2**30 - 1 - task.max_hops}, got {seed}")
    for k in range(task.min_hops, task.max_hops + 1) if ks is None else ks:
        yield (k, *task.sample(n_samples, k=k, seed=seed + k, device=device))


@torch.no_grad()
def predictions(model: nn.Module, inputs: torch.Tensor, batch_size: int = 512, *,
                num_classes: int | None = None, dropout: bool = False) -> torch.Tensor:
    """Argmax predictions (B, T) of ``model`` on ``inputs`` in eval mode, or training mode with ``dropout`` (the
    mode is restored). ``num_classes``, when given, is the fewest logits per position the model must give."""
    was_training = model.training
    model.train(dropout)
    try:
        out = []
        for i in range(0, inputs.shape[0], batch_size):
            with autocast(inputs.device):
                logits = model(inputs[i:i + batch_size])
            if num_classes is not None and logits.shape[-1] < num_classes:
                raise ValueError(f"model gives {logits.shape[-1]} logits per position but the task has "
                                 f"{num_classes} token ids: it could never predict the larger ones")
            out.append(logits.argmax(dim=-1))
        return torch.cat(out)
    finally:
        model.train(was_training)


def errors_from_predictions(pred: torch.Tensor, targets: torch.Tensor, task: HopTask,
                            metric: str = "paper") -> float:
    """The error of predictions ``pred`` against ``targets`` (both (B, T)) over letter targets only."""
    v = task.vocab
    letter = (targets >= v.first_letter) & (targets < v.no_answer)
    wrong = (pred != targets) & letter
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if metric == "pooled":
        n = int(letter.sum())
        return float(wrong.sum()) / n if n else float("nan")
    counts = letter.sum(dim=1)
    keep = counts > 0
    if not bool(keep.any()):
        return float("nan")
    return float((wrong.sum(dim=1)[keep].double() / counts[keep].double()).mean())


def per_k_errors(model: nn.Module, task: HopTask, *, n_samples: int = 100, seed: int = 0,
                 device: str | torch.device = "auto", metrics: Iterable[str] = METRICS,
                 ks: Iterable[int] | None = None) -> dict[str, dict[int, float]]:
    """``{metric: {k: error}}`` from one pass of predictions per k (the model in eval mode, on ``device``)."""
    if bad := next((n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())), None):
        raise ValueError(f"model parameter {bad} holds non-finite values (NaN or inf): its errors would be meaningless")
    out: dict[str, dict[int, float]] = {m: {} for m in metrics}
    for k, x, y in samples_per_k(task, ks, n_samples, seed, get_device(device)):
        pred = predictions(model, x, num_classes=task.vocab_size)
        for m in out:
            out[m][k] = errors_from_predictions(pred, y, task, m)
    return out


def per_k_error(model: nn.Module, task: HopTask, *, n_samples: int = 100, seed: int = 0,
                device: str | torch.device = "auto", metric: str = "paper",
                ks: Iterable[int] | None = None) -> dict[int, float]:
    """Test error err^n_k for each hop count k (default all of the task's) in one metric."""
    return per_k_errors(model, task, n_samples=n_samples, seed=seed, device=device, metrics=(metric,),
                        ks=ks)[metric]


# --------------------------------------------------------------------------- heads (Appendix G.4)
def find_pattern(inputs: torch.Tensor, task: HopTask, j: int | str) -> torch.Tensor:
    """The ideal attention map M (B, T, T) of a head that implements find^j: M[t, find^j(t-1) + 1] = 1, or
    M[t, 0] = 1 where it is ⊥ (query t >= 1 holds letter t-1; row 0 is empty). ``"prev"`` marks t-1,
    ``"start"`` position 0."""
    b, t = inputs.shape
    m = torch.zeros(b, t, t, device=inputs.device)
    rows = torch.arange(1, t, device=inputs.device)
    if j == "prev":
        cols = (rows - 1).expand(b, -1)
    elif j == "start":
        cols = torch.zeros_like(rows).expand(b, -1)
    else:
        cols = find_k(inputs[:, 1:] - task.vocab.first_letter, int(j)) + 1  # ⊥ (-1) lands on column 0
    m[torch.arange(b, device=inputs.device).unsqueeze(1), rows.expand(b, -1), cols] = 1.0
    return m


def alignment_score(att: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """Cosine similarity <A, M> = sum(A * M) / (||A||_F ||M||_F) over rows >= 1 (Appendix G.4), per leading
    index of ``att`` (..., T, T); ``pattern`` broadcasts to it."""
    a = att[..., 1:, :].float()
    m = pattern[..., 1:, :].float().expand_as(a)
    den = a.pow(2).sum(dim=(-2, -1)).sqrt() * m.pow(2).sum(dim=(-2, -1)).sqrt()
    return (a * m).sum(dim=(-2, -1)) / den.clamp(min=1e-12)


@torch.no_grad()
def attention_maps(model: nn.Module, inputs: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention weights, rows = queries, in eval mode: ``model(inputs, return_attention=True)``
    for :class:`hoplib.models.GPT`, or ``model.trace(inputs)`` for the hand-built models of Theorem 4.2."""
    if hasattr(model, "trace"):
        return list(model.trace(inputs).attentions)
    was_training = model.training
    model.eval()
    try:
        return list(model(inputs, return_attention=True)[1])
    finally:
        model.train(was_training)


def best_find_per_head(model: nn.Module, task: HopTask, *, ks: Iterable[int] | None = None,
                       js: Iterable[int] | None = None, n_samples: int = 10, seed: int = 0,
                       device: str | torch.device = "auto") -> dict[str, Any]:
    """For every layer, head and k, the alignment score of the head with "prev", find^j for ``js`` (default
    0..max_hops) and "start" (attention parked on position 0), averaged over ``n_samples`` samples of hop_k
    (seed ``seed + k``), and the pattern it matches best (the paper's Figures 10-15). Returns ``{"ks",
    "patterns", "scores": (L, H, K, P), "best": (L, H, K) indices, "best_score": (L, H, K)}``."""
    ks = list(range(task.min_hops, task.max_hops + 1)) if ks is None else list(ks)
    names = ["prev", *(range(task.max_hops + 1) if js is None else js), "start"]
    per_k = []
    for k in ks:
        x, _ = task.sample(n_samples, k=k, seed=seed + k, device=get_device(device))
        pats = [find_pattern(x, task, j) for j in names]
        per_k.append(torch.stack([torch.stack([alignment_score(att, p.unsqueeze(1)).mean(0) for p in pats], dim=-1)
                                  for att in attention_maps(model, x)]).cpu())  # (L, H, P)
    scores = torch.stack(per_k, dim=2)
    best_score, best = scores.max(dim=-1)
    return {"ks": ks, "patterns": [n if isinstance(n, str) else f"find^{n}" for n in names], "scores": scores,
            "best": best, "best_score": best_score}
