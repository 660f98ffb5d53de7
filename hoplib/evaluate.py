"""Test error per hop count k of a trained sequence model (Section 4.2 and Appendix G of the paper).

Two metrics, both over positions whose target is a letter (the ⊥ "no answer" and the position-0 blank are
excluded):

* ``metric="paper"``: the paper's err^n_k(T), for each sample the fraction of its letter positions predicted
  wrongly, averaged over the n samples (samples without any letter target are skipped);
* ``metric="pooled"``: the authors' code (paper-spec section 7), wrong predictions pooled over all letter
  positions of all samples, divided by their number. This is what ``authors-errors.json`` holds.

Predictions are the argmax over all logits, as in the authors' code. Test samples for hop count k are drawn
with ``HopTask.sample(n_samples, k=k, seed=seed + k)`` (training streams use disjoint seeds, see
:mod:`hoplib.train`). A model is any ``nn.Module`` mapping ids (B, T) to logits (B, T, C >= vocab size).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn as nn

from hoplib._validate import check_choice, check_int
from hoplib.device import autocast, get_device
from hoplib.tasks import HopTask

METRICS = ("paper", "pooled")


def _check_model_task(model: object, task: object) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")


def _ks(task: HopTask, ks: Iterable[int] | None) -> list[int]:
    if ks is None:
        return list(range(task.min_hops, task.max_hops + 1))
    return [check_int("ks[i]", k, low=task.min_hops, high=task.max_hops) for k in ks]


@torch.no_grad()
def predictions(model: nn.Module, inputs: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """Argmax predictions (B, T) of ``model`` on ``inputs`` in eval mode (the model's mode is restored)."""
    was_training = model.training
    model.eval()
    device = inputs.device
    try:
        out = []
        for i in range(0, inputs.shape[0], batch_size):
            with autocast(device):
                logits = model(inputs[i:i + batch_size])
            out.append(logits.argmax(dim=-1))
        return torch.cat(out)
    finally:
        model.train(was_training)


def errors_from_predictions(pred: torch.Tensor, targets: torch.Tensor, task: HopTask,
                            metric: str = "paper") -> float:
    """The error of predictions ``pred`` against ``targets`` (both (B, T)) over letter targets only."""
    check_choice("metric", metric, METRICS)
    v = task.vocab
    letter = (targets >= v.first_letter) & (targets < v.no_answer)
    wrong = (pred != targets) & letter
    if metric == "pooled":
        n = int(letter.sum())
        return float(wrong.sum()) / n if n else float("nan")
    counts = letter.sum(dim=1)
    keep = counts > 0
    if not bool(keep.any()):
        return float("nan")
    return float((wrong.sum(dim=1)[keep].double() / counts[keep].double()).mean())


def per_k_error(model: nn.Module, task: HopTask, *, n_samples: int = 100, seed: int = 0,
                device: str | torch.device = "auto", metric: str = "paper",
                ks: Iterable[int] | None = None) -> dict[int, float]:
    """Test error for each hop count k (default all of ``task.min_hops .. task.max_hops``), err^n_k of Sec. 4.2.

    ``metric="paper"`` averages per-sample error fractions; ``metric="pooled"`` pools positions (the authors'
    code). The model is evaluated in eval mode under ``torch.no_grad`` and its mode is restored afterwards;
    it must already live on ``device``.
    """
    _check_model_task(model, task)
    n_samples = check_int("n_samples", n_samples, low=1)
    seed = check_int("seed", seed, low=0, high=2**30 - 1 - task.max_hops)
    check_choice("metric", metric, METRICS)
    dev = get_device(device)
    out: dict[int, float] = {}
    for k in _ks(task, ks):
        x, y = task.sample(n_samples, k=k, seed=seed + k, device=dev)
        out[k] = errors_from_predictions(predictions(model, x), y, task, metric)
    return out


def error_records(model: nn.Module, task: HopTask, *, n_samples: int = 100, seed: int = 0,
                  device: str | torch.device = "auto", ks: Iterable[int] | None = None,
                  **labels: Any) -> list[dict[str, Any]]:
    """Tidy records ``{**labels, "k", "metric", "error", "n_samples"}``, both metrics, one row per (k, metric)."""
    _check_model_task(model, task)
    n_samples = check_int("n_samples", n_samples, low=1)
    seed = check_int("seed", seed, low=0, high=2**30 - 1 - task.max_hops)
    dev = get_device(device)
    rows = []
    for k in _ks(task, ks):
        x, y = task.sample(n_samples, k=k, seed=seed + k, device=dev)
        pred = predictions(model, x)
        for metric in METRICS:
            rows.append({**labels, "k": k, "metric": metric,
                         "error": errors_from_predictions(pred, y, task, metric), "n_samples": n_samples})
    return rows


def tidy_records(errors: dict[int, float] | dict[str, float], metric: str = "paper",
                 **labels: Any) -> list[dict[str, Any]]:
    """Turn a ``{k: error}`` map (int or string keys, as in results.json) into tidy records."""
    if not isinstance(errors, dict):
        raise TypeError(f"errors must be a dict from k to error, got {type(errors).__name__}")
    check_choice("metric", metric, METRICS)
    return [{**labels, "k": int(k), "metric": metric, "error": float(e)}
            for k, e in sorted(errors.items(), key=lambda kv: int(kv[0]))]


# --------------------------------------------------------------------------- interpretability (Appendix G.4)
def find_pattern(inputs: torch.Tensor, task: HopTask, j: int | str) -> torch.Tensor:
    """The ideal attention map M (B, T, T) of a head that implements find^j (or ``"prev"``) on ``inputs``.

    Query position t >= 1 holds letter t-1; M[t, find^j(t-1) + 1] = 1 where find^j is defined, and
    M[t, 0] = 1 (the hop-count token, which plays the start token's role) where it is ⊥. ``"prev"`` puts the
    1 at t-1. Row 0 (the hop-count token's own query) is left empty.
    """
    from hoplib.tasks import find_k

    letters = inputs[:, 1:] - task.vocab.first_letter
    b, t = inputs.shape
    m = torch.zeros(b, t, t, device=inputs.device)
    rows = torch.arange(1, t, device=inputs.device)
    if j == "prev":
        cols = (rows - 1).expand(b, -1)
    else:
        j = check_int("j", j, low=0)
        p = find_k(letters, j)
        cols = torch.where(p >= 0, p + 1, torch.zeros_like(p))
    m[torch.arange(b, device=inputs.device).unsqueeze(1), rows.expand(b, -1), cols] = 1.0
    return m


def alignment_score(att: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
    """Cosine similarity <A, M> = sum(A * M) / (||A||_F ||M||_F) per sample, rows >= 1 only (Appendix G.4).

    ``att`` (..., T, T) with rows = queries; ``pattern`` broadcastable to it. Returns shape ``att.shape[:-2]``.
    """
    a = att[..., 1:, :].float()
    m = pattern[..., 1:, :].float().expand_as(a)
    num = (a * m).sum(dim=(-2, -1))
    den = a.pow(2).sum(dim=(-2, -1)).sqrt() * m.pow(2).sum(dim=(-2, -1)).sqrt()
    return num / den.clamp(min=1e-12)


@torch.no_grad()
def alignment_scores(model: nn.Module, task: HopTask, *, k: int, js: Iterable[int] = (0, 1, 2, 3, 4),
                     n_samples: int = 10, seed: int = 0, device: str | torch.device = "auto") -> dict[str, Any]:
    """Alignment of every head with find^j (and with "previous token"), averaged over samples of hop_k.

    The model must accept ``return_attention=True`` (as :class:`hoplib.models.GPT` does). Returns
    ``{"patterns": names, "scores": tensor (L, H, P)}`` (Appendix G.4, Figures 10-15 of the paper).
    """
    _check_model_task(model, task)
    k = check_int("k", k, low=task.min_hops, high=task.max_hops)
    n_samples = check_int("n_samples", n_samples, low=1)
    dev = get_device(device)
    x, _ = task.sample(n_samples, k=k, seed=seed + k, device=dev)
    was_training = model.training
    model.eval()
    try:
        _, atts = model(x, return_attention=True)
    finally:
        model.train(was_training)
    names: list[str | int] = ["prev", *[check_int("js[i]", j, low=0) for j in js]]
    pats = [find_pattern(x, task, j) for j in names]
    scores = torch.stack([torch.stack([alignment_score(att, p.unsqueeze(1)).mean(0) for p in pats], dim=-1)
                          for att in atts])  # (L, H, P)
    return {"patterns": ["prev" if n == "prev" else f"find^{n}" for n in names], "scores": scores.cpu()}
