"""Checkers for the exercises of the chapter on training transformers on hop_k (Section 4.2, Appendix G)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hoplib.evaluate import alignment_score, errors_from_predictions, find_pattern
from hoplib.exercises import CheckResult, check_function, rounded
from hoplib.tasks import HopTask
from hoplib.train import linear_warmup_decay

_TASK = HopTask(seq_len=12, alphabet_size=3, max_hops=2)


def check_paper_error(user_fn: Callable[[torch.Tensor, torch.Tensor], float]) -> CheckResult:
    """Check ``user_fn(pred, targets)``: the paper's per-sample error over letter targets, averaged.

    Tensors are (B, T) token ids of ``HopTask(seq_len=12, alphabet_size=3, max_hops=2)``: letters are ids
    3, 4, 5; ⊥ is 6 and the blank 7. Compared to 6 decimals.
    """
    gen = torch.Generator().manual_seed(0)
    cases = []
    for i in range(30):
        _, y = _TASK.sample(int(torch.randint(1, 6, (1,), generator=gen)), seed=i)
        noise = torch.randint(0, _TASK.vocab_size, y.shape, generator=gen)
        flip = torch.rand(y.shape, generator=gen) < (i % 5) / 5
        cases.append((torch.where(flip, noise, y), y))
    return check_function(user_fn, lambda p, y: errors_from_predictions(p, y, _TASK, "paper"), cases,
                          name="paper_error", describe="pred, targets", answer=rounded)


def check_schedule(user_fn: Callable[[int, int, int], float]) -> CheckResult:
    """Check ``user_fn(step, steps, warmup_steps)``: the learning-rate factor (warmup from 0, decay to 0)."""
    cases = [(s, n, w) for n, w in ((100, 10), (50, 0), (1000, 1000), (7, 3)) for s in range(0, n + 1, max(1, n // 20))]
    return check_function(user_fn, lambda s, n, w: linear_warmup_decay(s, steps=n, warmup_steps=w), cases,
                          name="lr_factor", describe="step, steps, warmup", answer=rounded)


def check_alignment(user_fn: Callable[[torch.Tensor, torch.Tensor], float]) -> CheckResult:
    """Check ``user_fn(att, pattern)`` for one (T, T) attention map and one (T, T) 0/1 pattern: the cosine
    similarity sum(A * M) / (||A||_F ||M||_F) over rows 1.. (row 0, the hop-count token, is left out)."""
    gen = torch.Generator().manual_seed(1)
    cases = []
    for i in range(20):
        att = torch.rand(11, 11, generator=gen).tril() ** 4
        cases.append((att / att.sum(-1, keepdim=True), find_pattern(_TASK.sample(1, seed=100 + i)[0], _TASK, i % 3)[0]))
    return check_function(user_fn, alignment_score, cases, name="alignment", answer=rounded,
                          describe=lambda c: f"pattern ones at {c[1].nonzero().tolist()}")
