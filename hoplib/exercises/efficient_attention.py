"""Checkers for the exercises of the efficient-attention chapter: the causal Longformer mask, and the bits a
Longformer GPT posts as a blackboard protocol (measured by running the protocol)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hoplib.exercises import CheckResult, check_function, to_list
from hoplib.lower_bounds import communication, reductions
from hoplib.lower_bounds import efficient_attention as attn
from hoplib.models import GPT, GPTConfig


def _rows(mask: Any) -> list[str] | str:
    """One string of 0s and 1s per query row (short messages), or what is wrong with the shape."""
    arr = np.asarray(to_list(mask))
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        return f"an array of shape {arr.shape} (expected n x n)"
    return ["".join(str(int(v)) for v in row) for row in arr]


def check_longformer_mask(user_fn: Callable[[int, int, int | None], Any]) -> CheckResult:
    """Check ``user_fn(n, window, global_every)`` -> an n x n 0/1 matrix against ``longformer_mask``."""
    rng = np.random.default_rng(0)
    cases = [(1, 0, None), (5, 0, None), (6, 1, 3), (7, 2, 1), (9, 20, 4)]
    for _ in range(40):
        g = int(rng.integers(1, 9))
        cases.append((int(rng.integers(1, 25)), int(rng.integers(0, 8)), None if g == 8 else g))
    return check_function(user_fn, attn.longformer_mask, cases, name="your mask",
                          describe="n, window, global_every", answer=_rows)


def measured_longformer_bits(n: int, num_players: int, n_layers: int, d_model: int, window: int,
                             global_every: int | None) -> int:
    """Bits that P_p, ..., P_2 post (everything except P_1's answer) in the Longformer protocol, measured."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=5, n_positions=n, depth=n_layers, d_model=d_model, heads=2,
                          attention=attn.LongformerAttention(window, global_every))).eval()
    board = communication.Blackboard(num_players)
    x = np.random.default_rng(n).integers(0, 5, size=n)
    reductions.simulate_longformer_protocol(model, x, num_players, blackboard=board)
    return sum(len(p.bits) for p in board.posts if p.player > 1)


def check_longformer_bits(user_fn: Callable[[int, int, int, int, int, int | None], int]) -> CheckResult:
    """Check a formula ``user_fn(n, num_players, n_layers, d_model, window, global_every)`` for the bits that
    P_p, ..., P_2 post, against the protocol run on a random model."""
    cases = [(25, 3, 2, 4, 3, 6), (25, 3, 1, 4, 3, None), (17, 4, 2, 2, 6, 4), (12, 2, 1, 4, 0, 5),
             (30, 5, 3, 2, 10, 7), (9, 9, 1, 2, 1, 2), (40, 4, 2, 4, 5, 1), (21, 3, 1, 2, 30, None)]
    return check_function(user_fn, measured_longformer_bits, cases, name="your bit count", answer=int,
                          describe="n, num_players, n_layers, d_model, window, global_every")
