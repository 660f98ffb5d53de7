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

from hoplib._book.device import autocast, get_device
from hoplib._book.validate import check_choice, check_int
from hoplib.tasks import HopTask

METRICS = ("paper", "pooled")


def _check_model_task(model: object, task: object) -> None:
    """Types, and (where the model states them, as :class:`hoplib.models.GPT` does) its embedding rows
    ``config.vocab_size`` and output classes ``num_classes`` against the task's token ids, as ``fit`` does."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    config = getattr(model, "config", None)
    for attr, what in (("vocab_size", "embedding rows"), ("num_classes", "output classes")):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value < task.vocab_size:
            raise ValueError(f"model has {value} {what} ({attr}) but the task uses {task.vocab_size} token ids "
                             f"(task.vocab_size); build the model with at least {task.vocab_size}")


def _ks(task: HopTask, ks: Iterable[int] | None) -> list[int]:
    if ks is None:
        return list(range(task.min_hops, task.max_hops + 1))
    return [check_int("ks[i]", k, low=task.min_hops, high=task.max_hops) for k in ks]


def _forward(model: nn.Module, ids: torch.Tensor, num_classes: int | None) -> torch.Tensor:
    """Logits of ``model`` on ``ids``, checked: shape ids.shape + (C,) with C >= ``num_classes`` (if given)."""
    try:
        logits = model(ids)
    except IndexError as exc:  # an embedding with fewer rows than the largest token id
        raise ValueError(f"model failed on token ids up to {int(ids.max())} ({exc}); does its embedding have "
                         f"a row for every token id of the task?") from exc
    if not isinstance(logits, torch.Tensor) or logits.shape[:-1] != ids.shape:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"model must map ids {tuple(ids.shape)} to logits {tuple(ids.shape)} + (C,), got {got}")
    if num_classes is not None and logits.shape[-1] < num_classes:
        raise ValueError(f"model gives {logits.shape[-1]} logits per position but the task has {num_classes} "
                         f"token ids: its argmax could never predict the larger ones")
    return logits


@torch.no_grad()
def predictions(model: nn.Module, inputs: torch.Tensor, batch_size: int = 512, *,
                num_classes: int | None = None) -> torch.Tensor:
    """Argmax predictions (B, T) of ``model`` on ``inputs`` in eval mode (the model's mode is restored).

    ``num_classes`` (e.g. ``task.vocab_size``), when given, is the fewest logits per position the model must
    give; a ValueError says so otherwise, instead of scoring predictions that can never be right.
    """
    if num_classes is not None:
        num_classes = check_int("num_classes", num_classes, low=1)
    batch_size = check_int("batch_size", batch_size, low=1)
    was_training = model.training
    model.eval()
    device = inputs.device
    try:
        out = []
        for i in range(0, inputs.shape[0], batch_size):
            with autocast(device):
                logits = _forward(model, inputs[i:i + batch_size], num_classes)
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
        out[k] = errors_from_predictions(predictions(model, x, num_classes=task.vocab_size), y, task, metric)
    return out


def copy_letter_error(task: HopTask, *, n_samples: int = 1000, seed: int = 0, metric: str = "paper",
                      ks: Iterable[int] | None = None) -> dict[int, float]:
    """Error per k of the rule "answer the current letter", i.e. hop_0 applied whatever k is asked: the first
    thing a briefly trained model learns. It is 0 at k = 0 and exactly 1 at k = 1, since the task's strings have
    no immediate repeats, so the letter after the previous occurrence of x_i is never x_i; above chance there.
    Measured on ``n_samples`` samples per k with :func:`errors_from_predictions`."""
    if not isinstance(task, HopTask):
        raise TypeError(f"task must be a HopTask, got {type(task).__name__}")
    n_samples = check_int("n_samples", n_samples, low=1)
    seed = check_int("seed", seed, low=0, high=2**30 - 1 - task.max_hops)
    check_choice("metric", metric, METRICS)
    out = {}
    for k in _ks(task, ks):
        x, y = task.sample(n_samples, k=k, seed=seed + k, device="cpu")
        out[k] = errors_from_predictions(x, y, task, metric)  # the input token itself: the current letter
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
        pred = predictions(model, x, num_classes=task.vocab_size)
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
    """The ideal attention map M (B, T, T) of a head that implements find^j (or ``"prev"``, ``"start"``) on ``inputs``.

    Query position t >= 1 holds letter t-1; M[t, find^j(t-1) + 1] = 1 where find^j is defined, and
    M[t, 0] = 1 (the hop-count token, which plays the start token's role) where it is ⊥. ``"prev"`` puts the
    1 at t-1; ``"start"`` puts it at position 0 in every row (a head that parks its attention on the first
    token, which the authors' code also scores). Row 0 (the hop-count token's own query) is left empty.
    """
    from hoplib.tasks import find_k

    letters = inputs[:, 1:] - task.vocab.first_letter
    b, t = inputs.shape
    m = torch.zeros(b, t, t, device=inputs.device)
    rows = torch.arange(1, t, device=inputs.device)
    if j == "prev":
        cols = (rows - 1).expand(b, -1)
    elif j == "start":
        cols = torch.zeros_like(rows).expand(b, -1)
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
@torch.no_grad()
def attention_maps(model: nn.Module, inputs: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention weights, rows = queries (Appendix G.4), computed in eval mode (the model's mode is
    restored): ``model(inputs, return_attention=True)`` for :class:`hoplib.models.GPT`, or ``model.trace(inputs)``
    for models that have a ``trace`` (the hand-built models of Theorem 4.2)."""
    if hasattr(model, "trace"):
        return list(model.trace(inputs).attentions)
    was_training = model.training
    model.eval()
    try:
        _, atts = model(inputs, return_attention=True)
    finally:
        model.train(was_training)
    return list(atts)


def alignment_scores(model: nn.Module, task: HopTask, *, k: int, js: Iterable[int] = (0, 1, 2, 3, 4),
                     n_samples: int = 10, seed: int = 0, device: str | torch.device = "auto",
                     start: bool = False) -> dict[str, Any]:
    """Alignment of every head with find^j (and with "previous token"), averaged over samples of hop_k.

    The model must accept ``return_attention=True`` (as :class:`hoplib.models.GPT` does). Returns
    ``{"patterns": names, "scores": tensor (L, H, P)}`` (Appendix G.4, Figures 10-15 of the paper); the
    patterns are ``"prev"``, ``"find^j"`` for each j of ``js`` and, with ``start=True``, ``"start"`` last.
    """
    _check_model_task(model, task)
    k = check_int("k", k, low=task.min_hops, high=task.max_hops)
    n_samples = check_int("n_samples", n_samples, low=1)
    if not isinstance(start, bool):
        raise TypeError(f"start must be a bool, got {type(start).__name__}")
    dev = get_device(device)
    x, _ = task.sample(n_samples, k=k, seed=seed + k, device=dev)
    atts = attention_maps(model, x)
    names: list[str | int] = ["prev", *[check_int("js[i]", j, low=0) for j in js], *(["start"] if start else [])]
    pats = [find_pattern(x, task, j) for j in names]
    scores = torch.stack([torch.stack([alignment_score(att, p.unsqueeze(1)).mean(0) for p in pats], dim=-1)
                          for att in atts])  # (L, H, P)
    return {"patterns": [n if isinstance(n, str) else f"find^{n}" for n in names], "scores": scores.cpu()}


@torch.no_grad()
def best_find_per_head(model: nn.Module, task: HopTask, *, ks: Iterable[int] | None = None,
                       js: Iterable[int] | None = None, include_prev: bool = True, include_start: bool = True,
                       n_samples: int = 10, seed: int = 0, device: str | torch.device = "auto") -> dict[str, Any]:
    """For every layer, head and hop count k, the pattern that the head matches best (Figures 14-15, App. G.4).

    For each k (default ``task.min_hops .. task.max_hops``) this runs :func:`alignment_scores` on samples of
    hop_k and takes, per head, the argmax of the alignment score over the candidate patterns: find^j for
    ``js`` (default ``0 .. task.max_hops``), "previous token" (if ``include_prev``) and "start", attention
    parked on position 0 (if ``include_start``). Without the "start" candidate, a head that only looks at
    position 0 is scored best against the largest find^j, whose answers are mostly ⊥ (position 0).
    Returns ``{"ks": [k...], "patterns": names, "scores": tensor (L, H, K, P), "best": long tensor (L, H, K)
    of pattern indices, "best_score": tensor (L, H, K)}``; names are ordered ``prev, find^j..., start``.
    """
    _check_model_task(model, task)
    ks = _ks(task, ks)
    for name, flag in (("include_prev", include_prev), ("include_start", include_start)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    js = list(range(task.max_hops + 1)) if js is None else [check_int("js[i]", j, low=0) for j in js]
    if not js:
        raise ValueError("js must name at least one find^j (j >= 0)")
    per_k = [alignment_scores(model, task, k=k, js=js, n_samples=n_samples, seed=seed, device=device, start=True)
             for k in ks]
    names = per_k[0]["patterns"]  # prev, find^j..., start
    keep = [i for i, n in enumerate(names)
            if (n != "prev" or include_prev) and (n != "start" or include_start)]
    scores = torch.stack([a["scores"] for a in per_k], dim=2)[..., keep]  # (L, H, K, P)
    best_score, best = scores.max(dim=-1)
    return {"ks": ks, "patterns": [names[i] for i in keep], "scores": scores, "best": best,
            "best_score": best_score}


def head_roles(table: dict[str, Any], min_score: float = 0.0) -> dict[tuple[int, int], list[str]]:
    """``{(layer, head): [patterns]}`` (1-based layer and head) from :func:`best_find_per_head`: the distinct
    best patterns of each head over k, in order of first appearance, counting only cells whose best score is at
    least ``min_score`` (a head that acts as find^1 for small k and find^3 for large k gives
    ``["find^1", "find^3"]``)."""
    if not isinstance(table, dict) or not {"best", "best_score", "patterns"} <= set(table):
        raise TypeError("table must be the dict returned by best_find_per_head")
    if not isinstance(min_score, (int, float)) or not 0.0 <= min_score <= 1.0:
        raise ValueError(f"min_score must be a number in [0, 1], got {min_score!r}")
    names, best, score = table["patterns"], table["best"], table["best_score"]
    out: dict[tuple[int, int], list[str]] = {}
    for layer in range(best.shape[0]):
        for head in range(best.shape[1]):
            pairs = zip(best[layer, head].tolist(), score[layer, head].tolist(), strict=True)
            seen = [names[b] for b, s in pairs if s >= min_score]
            out[(layer + 1, head + 1)] = list(dict.fromkeys(seen))
    return out
