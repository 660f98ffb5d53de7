"""Lemma D.2 exactly as arXiv v1 writes it: the lastOccurrence embedding whose circle wraps around.

Sanford, Hsu & Telgarsky (arXiv v1), Lemma D.2 places symbol and position on one circle of length N|Σ|; as
``paper-spec.md`` section 4 notes, a key whose symbol is one larger can beat a true match. This module runs
that embedding with hardmax so the chapter can count how often it returns a wrong find¹; the model of
:mod:`hoplib.construction.layers` uses a score that cannot wrap.
"""

from __future__ import annotations

import math

import torch

from hoplib.tasks import NO_ANSWER

__all__ = ["lemma_d2_v1_find"]


def lemma_d2_v1_find(x: torch.Tensor) -> torch.Tensor:
    """find¹ as Lemma D.2's embedding is written in arXiv v1, with hardmax: the wrap-around bug, executable.

    Query at (1-based) position i: angle 2π(N·x_i + i)/(N|Σ|); key at j: angle 2π(N·x_{j-1} + j)/(N|Σ|);
    score cos(query - key); the start token scores cos(2π(N - 1/2)/(N|Σ|)); the causal mask keeps j <= i.
    Returns the argmax position in hoplib's 0-based convention (-1 = start token), for letters ``x`` (B, N)
    over ``x.max() + 1`` letters. Compare with :func:`hoplib.tasks.find`: they differ wherever a key whose
    symbol is one larger (cyclically) sits e positions back and N - e is smaller than the distance d to the
    true match (circular offset -(N - e) against +d), or than N - 1/2 when there is no match (the start
    token's offset): the circle of length N|Σ| wraps from one symbol's block into the next.
    """
    if not isinstance(x, torch.Tensor) or x.dtype != torch.int64 or x.ndim != 2:
        raise TypeError("x must be a LongTensor of letters with shape (B, N)")
    b, n = x.shape
    sig = int(x.max()) + 1
    circ = n * sig
    pos = torch.arange(1, n + 1, dtype=torch.float64, device=x.device)  # 1-based positions
    q_ang = 2 * math.pi * (n * x.double() + pos) / circ  # (B, N)
    prev = torch.cat([torch.full_like(x[:, :1], -1), x[:, :-1]], dim=1)  # X_{j-1}; -1 before the first letter
    k_ang = 2 * math.pi * (n * prev.double() + pos) / circ
    scores = torch.cos(q_ang[:, :, None] - k_ang[:, None, :])  # (B, i, j)
    scores = scores.masked_fill((prev < 0)[:, None, :], -2.0)  # j = 1 has no X_0 letter: never a match
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
    start = torch.full((b, n, 1), math.cos(2 * math.pi * (n - 0.5) / circ), dtype=torch.float64, device=x.device)
    best = torch.cat([start, scores], dim=2).argmax(-1)  # 0 = start token, j = 1-based key position
    return torch.where(best == 0, torch.full_like(best, NO_ANSWER), best - 1)
