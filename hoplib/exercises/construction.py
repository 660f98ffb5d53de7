"""Checkers for the exercises of the chapter on the log-depth construction (Theorem 4.2, Lemmas A.2, D.1)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from hoplib.construction import depth_ceil, hop_transformer, program_hops
from hoplib.exercises import CheckResult, check_function
from hoplib.tasks import HopTask, find, letters_to_str


def check_hop_program(user_program: Callable[[int], list[str]]) -> CheckResult:
    """Check a reader's ``program(k)``: a list of 'keep'/'acc'/'ptr' for layers 3, 4, ... that reaches exactly
    k hops (as run by :func:`hoplib.construction.program_hops`) with ⌈log₂ k⌉ + 2 layers in all, k = 1..64
    (Theorem 4.2 as built in the book). For k = 1 the right program is empty: after layer 2 the pointer P
    already holds one hop and the answer is read from it, so the model has 2 layers."""

    def summary(fn: Callable[[int], list[str]]) -> Callable[[int], tuple[int, int]]:
        def run(k: int) -> tuple[int, int]:
            prog = list(fn(k))
            return len(prog) + 2, (program_hops(prog) if prog else 1)
        return run

    def reference(k: int) -> tuple[int, int]:
        return depth_ceil(k), k

    return check_function(summary(user_program), reference, [(k,) for k in range(1, 65)],
                          name="program (depth, hops)", describe=lambda c: f"k={c[0]}")


def check_hardmax_temperature(user_fn: Callable[[int, float, int], float]) -> CheckResult:
    """Check a reader's ``c(n, margin, bits)``: the smallest inverse temperature c with
    (n - 1) exp(-c * margin) <= 2^-bits, i.e. softmax over n keys puts at most 2^-bits off the top key
    (Lemma A.2). Compared to 6 significant digits."""

    def reference(n: int, margin: float, bits: int) -> float:
        return float(f"{(math.log(n - 1) + bits * math.log(2)) / margin:.6g}")

    def rounded(n: int, margin: float, bits: int) -> float:
        return float(f"{float(user_fn(n, margin, bits)):.6g}")

    cases = [(n, margin, bits) for n in (2, 10, 100, 1000, 10**6) for margin in (1.0, 0.25, 1e-3)
             for bits in (8, 24, 53)]
    return check_function(rounded, reference, cases, name="hardmax temperature",
                          describe=lambda c: f"n={c[0]}, margin={c[1]}, bits={c[2]}")


def check_read_find(user_fn: Callable[[torch.nn.Module, torch.Tensor], list[int]]) -> CheckResult:
    """Check a reader's ``read_find(model, x)``: from ``model.trace`` of a hop_transformer on a 1-D letter
    tensor ``x``, read find¹ off the attention weights of the induction head (layer 2), as a list in hoplib's
    convention (-1 for ⊥)."""
    gen = torch.Generator().manual_seed(5)
    cases = []
    for n, a in ((6, 2), (12, 3), (25, 4), (40, 4), (30, 7)):
        x = HopTask(seq_len=n + 2, alphabet_size=a).letters(1, gen, torch.device("cpu"))[0]
        cases.append((hop_transformer(2, n, a), x))
    cases.append((hop_transformer(3, 10, 3), torch.tensor([0, 0, 1, 1, 2, 0, 0, 2])))  # repeats
    return check_function(user_fn, lambda model, x: find(x).tolist(), cases, name="read_find",
                          describe=lambda c: f"x={letters_to_str(c[1])!r}")
