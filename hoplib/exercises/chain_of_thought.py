"""Checkers for the exercises of the chapter on chain of thought: the full pointer chain, and the lookups per token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from hoplib.exercises import CheckResult, check_function
from hoplib.lower_bounds.cot import CHAINS, CotTask, lookups_per_token


def _reference_chain(letters: list[int], k: int) -> list[str]:
    task = CotTask(seq_len=len(letters) + 2, alphabet_size=max(2, max(letters) + 1), max_hops=max(k, 1),
                   min_hops=0, chain="full")
    batch = task.from_letters(torch.tensor([letters]), torch.tensor([k]))
    return task.decode(batch.chain[0, :int(batch.chain_len[0])]) + [task.token_str(batch.answer[0])]


def check_full_chain(user_fn: Callable[[list[int], int], Any]) -> CheckResult:
    """Check ``user_fn(letters, k) -> list of str``: the full chain and then the answer, as readable tokens.

    Letters are ints 0, 1, ... (positions 0-based). Tokens: ``"@p"`` for the pointer find^j(N-1) = p,
    ``"(p,a)"`` for the pair (p, x_p) with the letter written 'a', 'b', ...; ``"~"`` for ⊥ (the chain broke);
    the answer is a letter ('a', ...) or ``"~"``. For k = 0 the list is just the last letter.
    """
    rng = np.random.default_rng(0)
    cases = [([1, 0, 4, 1, 2, 0, 1, 4, 1, 3, 4, 0], 2), ([0, 1, 0, 1], 3), ([2, 0, 1], 1), ([0, 1, 2], 2)] + [
        (rng.integers(0, int(rng.integers(2, 5)), size=int(rng.integers(3, 16))).tolist(), int(rng.integers(0, 6)))
        for _ in range(150)]
    return check_function(lambda letters, k: user_fn(list(letters), k), _reference_chain, cases,
                          name="your chain", describe="letters, k", answer=lambda out: [str(t) for t in out])


def check_lookups(user_fn: Callable[[int, str], Any]) -> CheckResult:
    """Check ``user_fn(k, chain) -> list of int``: for each generated token (chain, then answer), the dependent
    lookups it needs after the token before it; against :func:`~hoplib.lower_bounds.cot.lookups_per_token`."""
    return check_function(user_fn, lookups_per_token, [(k, c) for c in CHAINS for k in range(13)],
                          name="your lookup count", describe=lambda c: f"k={c[0]}, chain={c[1]!r}",
                          answer=lambda out: [int(v) for v in out])
