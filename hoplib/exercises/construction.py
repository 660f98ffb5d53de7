"""Checkers for the exercises of the chapter on the log-depth construction (Theorem 4.2, Lemmas A.2, D.1)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from hoplib.construction import hop_transformer, program_hops
from hoplib.exercises import CheckResult, check_function
from hoplib.report import depth_ceil
from hoplib.tasks import HopTask, find, letters_to_str


def check_hop_program(user_program: Callable[[int], list[str]]) -> CheckResult:
    """Check ``program(k)`` (a list of 'keep'/'acc'/'ptr' for layers 3, 4, ...): it must reach exactly k hops
    with ⌈log₂ k⌉ + 2 layers in all, k = 1..64. For k = 1 the program is empty: P already holds one hop."""

    def run(k: int) -> tuple[int, int]:
        prog = list(user_program(k))
        return len(prog) + 2, (program_hops(prog) if prog else 1)

    return check_function(run, lambda k: (depth_ceil(k), k), [(k,) for k in range(1, 65)],
                          name="program (depth, hops)", describe="k")


def check_hardmax_temperature(user_fn: Callable[[int, float, int], float]) -> CheckResult:
    """Check ``c(n, margin, bits)``: the smallest c with (n - 1) exp(-c * margin) <= 2^-bits (Lemma A.2),
    compared to 6 significant digits."""
    cases = [(n, m, b) for n in (2, 10, 100, 1000, 10**6) for m in (1.0, 0.25, 1e-3) for b in (8, 24, 53)]
    return check_function(user_fn, lambda n, m, b: (math.log(n - 1) + b * math.log(2)) / m, cases,
                          name="hardmax temperature", describe="n, margin, bits",
                          answer=lambda c: float(f"{float(c):.6g}"))


def check_read_find(user_fn: Callable[[torch.nn.Module, torch.Tensor], list[int]]) -> CheckResult:
    """Check ``read_find(model, x)``: find¹ read off the induction head's (layer 2's) attention weights in
    ``model.trace`` of a hop_transformer on a 1-D letter tensor ``x``, as a list (-1 for ⊥)."""
    gen = torch.Generator().manual_seed(5)
    cases = [(hop_transformer(2, n, a), HopTask(seq_len=n + 2, alphabet_size=a).letters(1, gen, "cpu")[0])
             for n, a in ((6, 2), (12, 3), (25, 4), (40, 4), (30, 7))]
    cases.append((hop_transformer(3, 10, 3), torch.tensor([0, 0, 1, 1, 2, 0, 0, 2])))  # repeats
    return check_function(user_fn, lambda model, x: find(x), cases, name="read_find",
                          describe=lambda c: f"x={letters_to_str(c[1])!r}")
